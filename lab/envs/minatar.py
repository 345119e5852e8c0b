"""MinAtar games from gymnax as pure JAX functions, with gymnax 1.0's auto-resetting step.

MinAtar (Young & Tian 2019) reduces five Atari games to 10x10 grids with one binary channel
per kind of object; gymnax (Lange 2022) implements them in JAX. ``MinAtarTask`` keeps
gymnax 1.0's step API, which is what actor-critic loops need:

- ``step`` auto-resets: after the last step of an episode the returned observation and
  state are the new episode's, and ``final_obs`` is the observation the episode ended in;
- ``terminated`` (the game is over: no bootstrap) and ``truncated`` (the time limit: the
  return is bootstrapped from ``V(final_obs)``) are told apart;
- optional sticky actions, as MinAtar's own environments have them (probability 0.1 there;
  gymnax has none): with probability ``sticky`` the previous action is repeated. The
  previous action lives in the state and is 0 (no-op) after a reset.

Everything jits and vmaps: ``jax.vmap(task.step)`` steps a batch of games.
``MinAtarTask("breakout", sticky=0.1)``; games: see ``GAMES``.

``HostMinAtar`` is the same game stepped on the host by MinAtar's own numpy implementation
(the ``minatar`` package, Young & Tian's reference), with the same observations, the same
(minimal) action set in the same order as gymnax, and the same step API. It is what the
host executions (GA3C's agent threads) step: about 5-50 microseconds a step, where one
jitted gymnax step called from Python costs a dispatch and three transfers (~0.5 ms here).
"""

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lab.envs.control import strongly_typed

GAMES = {"breakout": "Breakout-MinAtar", "asterix": "Asterix-MinAtar",
         "freeway": "Freeway-MinAtar", "space_invaders": "SpaceInvaders-MinAtar",
         "seaquest": "Seaquest-MinAtar"}


class MinAtarState(NamedTuple):
    game: Any  # gymnax's state of the game
    last_action: jax.Array  # int32, for sticky actions


class MinAtarStep(NamedTuple):
    reward: jax.Array  # float32
    terminated: jax.Array  # bool: the game ended; nothing to bootstrap
    truncated: jax.Array  # bool: the time limit; bootstrap from final_obs
    final_obs: jax.Array  # the observation the step reached, before any auto-reset
    action: jax.Array  # the action the game executed (the previous one when it stuck)


@dataclasses.dataclass(frozen=True)
class MinAtarTask:
    """One MinAtar game; observations are float32 ``(10, 10, channels)`` in {0, 1}."""

    game: str = "breakout"
    """One of ``GAMES``."""
    sticky: float = 0.0
    """Probability of repeating the previous action instead of the chosen one."""
    max_steps: int = 0
    """Time limit in steps (truncation); 0 for the game's own (1,000; Freeway 2,500)."""

    def __post_init__(self):
        if self.game not in GAMES:
            raise ValueError(f"unknown MinAtar game {self.game!r}; choose one of "
                             f"{', '.join(GAMES)}")
        if not 0.0 <= self.sticky < 1.0:
            raise ValueError(f"sticky must be in [0, 1), got {self.sticky}")
        if self.max_steps < 0:
            raise ValueError(f"max_steps must be 0 (the game's limit) or more, got "
                             f"{self.max_steps}")

    # gymnax is imported on first use, not by the checks above: importing it costs 2.6 s of
    # CPU here (measured 2026-11-28), and a process that only checks parameters (``python -m
    # lab run`` before any kernel starts, a sweep's notebook) never steps a game
    @functools.cached_property
    def _gymnax(self) -> tuple[Any, Any]:
        import gymnax

        with jax.ensure_compile_time_eval():  # concrete values even when first used in a jit
            env, params = gymnax.make(GAMES[self.game])
            if self.max_steps:
                params = params.replace(max_steps_in_episode=self.max_steps)
        return env, params

    @property
    def _env(self):
        return self._gymnax[0]

    @property
    def _params(self):
        return self._gymnax[1]

    @property
    def num_actions(self) -> int:
        return int(self._env.num_actions)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self._env.observation_space(self._params).shape)

    @property
    def episode_steps(self) -> int:
        """The time limit of an episode."""
        return int(self._params.max_steps_in_episode)

    def reset(self, key: jax.Array) -> tuple[jax.Array, MinAtarState]:
        """A new episode: ``(obs, state)``."""
        obs, game = self._env.reset(key, self._params)
        return obs.astype(jnp.float32), MinAtarState(strongly_typed(game), jnp.zeros((), jnp.int32))

    def step(self, key: jax.Array, state: MinAtarState, action: jax.Array
             ) -> tuple[jax.Array, MinAtarState, MinAtarStep]:
        """One step, auto-resetting at the end of an episode: ``(obs, state, step)``."""
        k_sticky, k_step = jax.random.split(key)
        action = jnp.asarray(action, jnp.int32)
        if self.sticky > 0.0:
            action = jnp.where(jax.random.uniform(k_sticky) < self.sticky, state.last_action,
                               action)
        obs, game, reward, terminated, truncated, info = self._env.step(
            k_step, state.game, action, self._params)
        done = terminated | truncated
        last = jnp.where(done, 0, action).astype(jnp.int32)
        step = MinAtarStep(jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, bool),
                           jnp.asarray(truncated, bool) & ~jnp.asarray(terminated, bool),
                           info["final_observation"].astype(jnp.float32), action)
        return obs.astype(jnp.float32), MinAtarState(strongly_typed(game), last), step



class HostMinAtar:
    """One MinAtar game stepped on the host in numpy, auto-resetting like ``MinAtarTask``.

    ``reset() -> obs``; ``step(action) -> (obs, MinAtarStep)`` with ``action`` an index into
    the minimal action set (as in gymnax). Sticky actions are MinAtar's own; the time limit
    is gymnax's (MinAtar's games have none), so episodes end alike in both.
    """

    def __init__(self, game: str = "breakout", sticky: float = 0.0, max_steps: int = 0,
                 seed: int = 0):
        task = MinAtarTask(game, sticky, max_steps)  # checks the settings
        from minatar import Environment

        self.env = Environment(game, sticky_action_prob=sticky)
        self.env.seed(seed)
        self.actions = self.env.minimal_action_set()
        self.limit, self.t = task.episode_steps, 0
        if len(self.actions) != task.num_actions:
            raise RuntimeError(f"MinAtar's {game} has {len(self.actions)} actions, gymnax's "
                               f"{task.num_actions}")

    def reset(self) -> np.ndarray:
        self.env.reset()
        self.t = 0
        return self.env.state().astype(np.float32)

    def step(self, action: int) -> tuple[np.ndarray, MinAtarStep]:
        reward, terminated = self.env.act(self.actions[int(action)])
        self.t += 1
        obs = self.env.state().astype(np.float32)
        truncated = not terminated and self.t >= self.limit
        step = MinAtarStep(np.float32(reward), bool(terminated), bool(truncated), obs,
                           int(action))
        if terminated or truncated:
            obs = self.reset()
        return obs, step
