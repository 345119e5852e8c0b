"""Whole episodes inside one jit: the uniform-random-policy baseline and evaluation episodes."""

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


def episode_return(task, act, key):
    """Undiscounted return of one episode of a ``lab.envs.control.ControlTask``, acting with
    ``act(state, obs, key) -> action``; rewards after the episode ends (termination or the
    time limit) are not counted. Runs ``task.episode_steps`` steps in one ``lax.scan``."""
    k_reset, k_steps = jax.random.split(key)
    state, obs = task.reset(k_reset)

    def step(carry, k):
        state, obs, total, alive = carry
        k_act, k_step = jax.random.split(k)
        state, obs, reward, terminated, truncated = task.step(state, act(state, obs, k_act),
                                                              k_step)
        total = total + jnp.where(alive, reward, 0.0)
        return (state, obs, total, alive & ~(terminated | truncated)), None

    (_, _, total, _), _ = jax.lax.scan(step, (state, obs, jnp.zeros(()), jnp.ones((), bool)),
                                       jax.random.split(k_steps, task.episode_steps))
    return total
