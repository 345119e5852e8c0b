"""The DeepMind Control Suite from states, through dm_control and MuJoCo (host-side, numpy).

Tassa et al. 2018, "DeepMind Control Suite", https://arxiv.org/abs/1801.00690. The standard
from-states benchmark (the paper's Section 5, and Abdolmaleki et al. 2018's MPO) acts at every
physics-control step: no action repeat, 1000 agent steps per episode, returns in ``[0, 1000]``.

``DMCStates`` is the host counterpart of ``lab.envs.control.ControlTask``, for the agents of
``lab.train`` driven from a Python loop (``lab.train.mpo_host``):

- the observation is the task's observation dict flattened and concatenated into one float32
  vector, in the order of the task's ``observation_spec`` (fixed per task; ``obs_keys``);
- actions are in ``[-1, 1]^A``, clipped, and rescaled linearly to the task's bounds (most
  tasks' bounds are ``[-1, 1]``; quadruped's are not);
- one agent step repeats its action ``action_repeat`` times (default 1, the classic setting)
  and returns the sum of the rewards (each in ``[0, 1]``). A larger repeat (4 or 8) makes a
  CPU run proportionally cheaper in agent steps at the price of coarser control;
- ``step`` does not reset; it tells termination (discount 0: a true terminal state) apart from
  truncation (the time limit, 1000 physics-control steps in every suite task, where the return
  is bootstrapped). Episodes have ``episode_steps = ceil(limit / action_repeat)`` agent steps;
  the last one repeats fewer times when ``action_repeat`` does not divide the limit.

Nothing is rendered, but dm_control imports a GL backend, so ``MUJOCO_GL`` is chosen as in
``lab.envs.dmc`` before dm_control is imported (when the first environment is made).

    env = make_dmc_states("cartpole_swingup")       # 5 floats, 1 action, 1000 steps
    obs = env.reset()
    obs, reward, terminated, truncated = env.step(np.zeros(env.action_dim))
    env.close()
"""

import math

import numpy as np

from lab.envs.dmc import _load_suite


class DMCStates:
    """A DeepMind Control Suite task observed through its low-dimensional state;
    ``DMCStates("cartpole_swingup", action_repeat=1, seed=0)``."""

    name: str
    """``domain_task``, e.g. ``"cartpole_swingup"`` or ``"ball_in_cup_catch"``."""
    action_repeat: int
    """Physics-control steps per agent step; the agent's reward is their sum."""
    obs_dim: int
    action_dim: int
    episode_steps: int
    """Agent steps per episode (the time limit), ``ceil(limit / action_repeat)``."""
    obs_keys: tuple[str, ...]
    """The observation dict's keys, in the order their values are concatenated."""

    def __init__(self, name: str, action_repeat: int = 1, seed: int = 0):
        suite = _load_suite()
        tasks = {f"{domain}_{task}": (domain, task) for domain, task in suite.ALL_TASKS}
        if name not in tasks:
            raise ValueError(f"unknown dm_control task {name!r}; choose one of "
                             f"{', '.join(sorted(tasks))}")
        if not isinstance(action_repeat, int) or action_repeat < 1:
            raise ValueError(f"action_repeat must be an integer >= 1, got {action_repeat!r}")
        self.name, self.action_repeat = name, action_repeat
        domain, task = tasks[name]
        self._env = suite.load(domain, task, task_kwargs={"random": seed})
        spec = self._env.action_spec()
        self.action_dim = int(np.prod(spec.shape))
        self._low = np.broadcast_to(spec.minimum, spec.shape).reshape(-1).astype(np.float64)
        self._high = np.broadcast_to(spec.maximum, spec.shape).reshape(-1).astype(np.float64)
        obs_spec = self._env.observation_spec()
        self.obs_keys = tuple(obs_spec)
        self.obs_dim = sum(int(np.prod(obs_spec[k].shape)) for k in self.obs_keys)
        # dm_control's control.Environment keeps its time limit in physics-control steps here.
        self.episode_steps = math.ceil(self._env._step_limit / action_repeat)

    def _flatten(self, observation) -> np.ndarray:
        return np.concatenate([np.asarray(observation[k], np.float32).reshape(-1)
                               for k in self.obs_keys])

    def scale(self, action) -> np.ndarray:
        """The task's action for ``action`` in ``[-1, 1]^A`` (clipped first)."""
        action = np.clip(np.asarray(action, np.float64).reshape(self.action_dim), -1.0, 1.0)
        return self._low + (action + 1.0) * 0.5 * (self._high - self._low)

    def reset(self) -> np.ndarray:
        """Start a new episode (a new random initial state); return its observation."""
        return self._flatten(self._env.reset().observation)

    def step(self, action) -> tuple[np.ndarray, float, bool, bool]:
        """Repeat ``action`` ``action_repeat`` times (fewer if the episode ends first); return
        ``(obs, summed reward, terminated, truncated)``. Call ``reset`` after either is true."""
        action = self.scale(action)
        reward = 0.0
        for _ in range(self.action_repeat):
            time_step = self._env.step(action)
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        terminated = time_step.last() and time_step.discount == 0.0
        truncated = time_step.last() and not terminated
        return self._flatten(time_step.observation), float(reward), terminated, truncated

    def seed(self, seed: int) -> None:
        """Reseed the task's random initial states (the next ``reset`` uses it)."""
        self._env.task.random.seed(seed)

    def close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"DMCStates({self.name!r}, action_repeat={self.action_repeat})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_dmc_states(name: str, *, action_repeat: int = 1, seed: int = 0) -> DMCStates:
    """The dm_control task ``name`` (``domain_task``) from states; ``action_repeat=1`` is the
    classic from-states setting (1000 agent steps per episode)."""
    return DMCStates(name, action_repeat=action_repeat, seed=seed)
