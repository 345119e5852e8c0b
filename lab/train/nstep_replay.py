"""A ring buffer of flat transitions with n-step sampling, as pure functions inside jit.

Slot ``i`` holds the transition written at absolute time ``t`` with ``i = t % capacity``:
``obs``, ``action``, ``reward``, ``discount`` (0.0 when ``next_obs`` is terminal), ``end``
(the episode ended there: terminal or time limit), ``next_obs`` and, optionally, the
environment ``state`` the action was taken from (a pytree: what a search with the true model
starts from).

``sample`` draws uniformly from the stored transitions and returns, for each, the n-step
return ``G = sum_{k<L} gamma^k r_{t+k}``, the state to bootstrap from, ``next_obs`` of
transition ``t+L-1``, and its discount ``gamma^L * discount_{t+L-1}``. ``L <= n`` stops early
at the end of an episode and at the newest stored transition, so every sampled target is
well defined.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Replay(NamedTuple):
    obs: jax.Array
    """``(capacity, O)``."""
    action: jax.Array
    """``(capacity, D)`` the action as executed (clipped to [-1, 1])."""
    reward: jax.Array
    discount: jax.Array
    end: jax.Array
    """``(capacity,)`` bool: the episode ended with this transition."""
    next_obs: jax.Array
    state: Any
    """Environment states, a pytree of ``(capacity, ...)`` arrays, or ``None``."""
    size: jax.Array
    """Transitions stored (at most ``capacity``)."""
    head: jax.Array
    """The slot the next transition goes to."""


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    """The one-step reward (for a learned model)."""
    discount: jax.Array
    next_obs: jax.Array
    """The one-step next observation (for a learned model)."""
    state: Any
    returns: jax.Array
    """The n-step return ``G`` without its bootstrap."""
    bootstrap_obs: jax.Array
    bootstrap_discount: jax.Array
    """``gamma^L * discount``: what multiplies the bootstrap value."""


def init(capacity: int, obs_dim: int, action_dim: int, example_state: Any = None) -> Replay:
    """An empty buffer; pass ``example_state`` to store environment states too."""
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    state = None if example_state is None else jax.tree.map(
        lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example_state)
    return Replay(jnp.zeros((capacity, obs_dim)), jnp.zeros((capacity, action_dim)),
                  jnp.zeros((capacity,)), jnp.zeros((capacity,)), jnp.zeros((capacity,), bool),
                  jnp.zeros((capacity, obs_dim)), state, jnp.zeros((), jnp.int32),
                  jnp.zeros((), jnp.int32))


def add(replay: Replay, obs, action, reward, discount, end, next_obs, state=None) -> Replay:
    """``replay`` with one transition written at ``head`` (overwriting the oldest when full)."""
    i = replay.head
    capacity = replay.obs.shape[0]
    stored = None if replay.state is None else jax.tree.map(
        lambda buf, x: buf.at[i].set(x), replay.state, state)
    return Replay(replay.obs.at[i].set(obs), replay.action.at[i].set(action),
                  replay.reward.at[i].set(reward), replay.discount.at[i].set(discount),
                  replay.end.at[i].set(end), replay.next_obs.at[i].set(next_obs), stored,
                  jnp.minimum(replay.size + 1, capacity), (i + 1) % capacity)


def nstep(replay: Replay, index: jax.Array, n: int, gamma: float
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(G, bootstrap_obs, bootstrap_discount)`` of the transition in slot ``index``."""
    capacity = replay.obs.shape[0]
    slots = (index + jnp.arange(n)) % capacity
    newest = (replay.head - 1) % capacity
    available = (newest - index) % capacity + 1  # transitions from index to the newest
    ended_before = jnp.concatenate([jnp.zeros((1,), bool), jnp.cumsum(replay.end[slots])[:-1] > 0])
    valid = (jnp.arange(n) < available) & ~ended_before
    length = jnp.sum(valid)
    returns = jnp.sum(jnp.where(valid, gamma ** jnp.arange(n) * replay.reward[slots], 0.0))
    last = slots[length - 1]
    return returns, replay.next_obs[last], gamma**length * replay.discount[last]


def sample(replay: Replay, key: jax.Array, batch_size: int, n: int, gamma: float) -> Batch:
    """``batch_size`` transitions drawn uniformly (with replacement), with n-step targets.
    The buffer must hold at least one transition (the agents check this up front)."""
    index = jax.random.randint(key, (batch_size,), 0, jnp.maximum(replay.size, 1))
    returns, boot_obs, boot_discount = jax.vmap(nstep, in_axes=(None, 0, None, None))(
        replay, index, n, gamma)
    state = None if replay.state is None else jax.tree.map(lambda x: x[index], replay.state)
    return Batch(replay.obs[index], replay.action[index], replay.reward[index],
                 replay.discount[index], replay.next_obs[index], state, returns, boot_obs,
                 boot_discount)
