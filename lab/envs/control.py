"""Continuous-control tasks from gymnax as pure JAX functions with actions in ``[-1, 1]``.

gymnax (Lange 2022, https://github.com/RobertTLange/gymnax) implements the classic-control
environments in JAX. ``ControlTask`` wraps one with the conventions of ``lab``'s agents:

- actions are in ``[-1, 1]^D`` and rescaled linearly to the environment's box (Pendulum's
  torque is in ``[-2, 2]``); actions outside are clipped first;
- ``step`` does not reset, and tells termination (a terminal state, no bootstrap) apart from
  truncation (the time limit, where the return is bootstrapped);
- the state is gymnax's own pytree, so a search can copy it and step many copies with
  ``jax.vmap``: the environment is its own exact model.

``ControlTask("Pendulum-v1")`` or ``ControlTask("MountainCarContinuous-v0")``; any gymnax
environment with a continuous (``Box``) action space works, others are refused.
"""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

CONTROL_TASKS = ("Pendulum-v1", "MountainCarContinuous-v0")
"""The continuous-action gymnax environments that ``lab`` is tested on."""


@dataclasses.dataclass(frozen=True)
class ControlTask:
    """A gymnax continuous-control environment with actions rescaled to ``[-1, 1]``."""

    name: str = "Pendulum-v1"
    """A gymnax environment id with a ``Box`` action space."""

    def __post_init__(self):
        if self.name not in CONTROL_TASKS:  # checked against gymnax itself (seconds)
            self._gymnax  # noqa: B018

    # gymnax is imported on first use: 2.6 s of CPU here (measured 2026-11-28), which a
    # process that only checks parameters for one of CONTROL_TASKS (``python -m lab run``
    # before any kernel starts, a sweep's notebook) does without
    @functools.cached_property
    def _gymnax(self) -> tuple[Any, Any, jax.Array, jax.Array]:
        import gymnax
        from gymnax.environments import spaces

        if self.name not in gymnax.registered_envs:
            raise ValueError(f"unknown gymnax environment {self.name!r}; continuous-control "
                             f"ones: {', '.join(CONTROL_TASKS)}")
        with jax.ensure_compile_time_eval():  # concrete values even when first used in a jit
            env, params = gymnax.make(self.name)
            space = env.action_space(params)
            if not isinstance(space, spaces.Box):
                raise ValueError(f"{self.name} has a {type(space).__name__} action space; "
                                 f"these agents need continuous (Box) actions, e.g. "
                                 f"{', '.join(CONTROL_TASKS)}")
            low, high = (jnp.broadcast_to(jnp.asarray(b, jnp.float32), space.shape)
                         for b in (space.low, space.high))
        return env, params, low, high

    _env = property(lambda self: self._gymnax[0])
    _params = property(lambda self: self._gymnax[1])
    _low = property(lambda self: self._gymnax[2])
    _high = property(lambda self: self._gymnax[3])

    @property
    def action_dim(self) -> int:
        return int(self._low.shape[0])

    @property
    def obs_dim(self) -> int:
        return int(self._env.observation_space(self._params).shape[0])

    @property
    def episode_steps(self) -> int:
        """The time limit: steps per episode unless it terminates earlier."""
        return int(self._params.max_steps_in_episode)

    def scale(self, action: jax.Array) -> jax.Array:
        """The environment's action for ``action`` in ``[-1, 1]^D`` (clipped first)."""
        action = jnp.clip(action, -1.0, 1.0)
        return self._low + (action + 1.0) * 0.5 * (self._high - self._low)

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        """A new episode: ``(state, obs)``."""
        obs, state = self._env.reset_env(key, self._params)
        return strongly_typed(state), obs.astype(jnp.float32)

    def step(self, state: Any, action: jax.Array, key: jax.Array
             ) -> tuple[Any, jax.Array, jax.Array, jax.Array, jax.Array]:
        """One step without reset: ``(state, obs, reward, terminated, truncated)``.

        ``terminated`` is a true terminal state (no bootstrap, e.g. MountainCar's goal);
        ``truncated`` is the time limit. The episode ends when either is true.
        """
        obs, state, reward, terminated, _ = self._env.step_env(
            key, state, self.scale(action), self._params)
        truncated = self._env.is_truncated(state, self._params) & ~terminated
        return (strongly_typed(state), obs.astype(jnp.float32), reward.astype(jnp.float32),
                jnp.asarray(terminated, bool), jnp.asarray(truncated, bool))

    def observe(self, state: Any) -> jax.Array:
        """The observation of a state (what ``reset`` and ``step`` return for it)."""
        return self._env.get_obs(state, self._params).astype(jnp.float32)



def strongly_typed(state: Any) -> Any:
    """gymnax states hold Python ints and weakly typed arrays; give every leaf a fixed dtype
    so that a state's pytree type is the same after reset and after any number of steps."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), state)
