"""Whole episodes inside one jit: the uniform-random-policy baseline."""

import jax
import jax.numpy as jnp


def random_episode_return(env, key):
    """Undiscounted return of one full episode of uniform actions in ``[-1, 1]``.

    ``env`` is a static environment (``make(...)``); vmap over keys for several episodes.
    """
    reset_key, action_key = jax.random.split(key)
    state, _ = env.reset(reset_key)

    def step(state, step_key):
        action = jax.random.uniform(step_key, (env.action_size,), minval=-1.0, maxval=1.0)
        state, _, reward, _ = env.step(state, action, step_key)
        return state, reward

    _, rewards = jax.lax.scan(step, state, jax.random.split(action_key, env.episode_steps))
    return jnp.sum(rewards)
