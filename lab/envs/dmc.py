"""The DeepMind Control Suite from pixels, through dm_control and MuJoCo (host-side, numpy).

Tassa et al. 2018, "DeepMind Control Suite", https://arxiv.org/abs/1801.00690; the six tasks
and their action repeats are those of SAC-AE (Yarats et al. 2019, "Improving Sample Efficiency
in Model-free Reinforcement Learning from Images", https://arxiv.org/abs/1910.01741).

Unlike the pure-JAX environments in ``lab.envs``, these run MuJoCo on the host: ``reset`` and
``step`` take and return numpy arrays and cannot be jitted. The interface mirrors theirs
otherwise: the observation is one ``(image_size, image_size, 3)`` uint8 RGB frame from
camera 0 (frames are stacked by the replay buffer, not here), actions lie in ``[-1, 1]^A`` and
are rescaled to the task's bounds, and one agent step repeats its action ``action_repeat``
times and returns the sum of the rewards (each in ``[0, 1]``). The frame is rendered once,
after the last repeat. Every task has a time limit of 1000 physics-control steps, so an
episode has ``1000 // action_repeat`` agent steps; ``done`` is that time limit.

Rendering is headless: ``MUJOCO_GL=egl`` on a machine with an NVIDIA GPU, else ``osmesa``
(software; on Debian ``apt-get install libosmesa6``). If ``MUJOCO_GL`` is unset it is chosen
when the first environment is made, before dm_control is imported; dm_control reads it once.
dm_control itself is imported only then, so ``import lab.envs`` works without it.

    env = make_dmc("cartpole_swingup", image_size=84)    # action repeat 8, 125 steps
    frame = env.reset()
    frame, reward, done = env.step(np.zeros(env.action_size))
    env.close()
"""

import ctypes
import functools
import glob
import os
import sys
import threading
import weakref

import numpy as np

DMC_TASKS = {
    "cartpole_swingup": 8,
    "cheetah_run": 4,
    "walker_walk": 2,
    "finger_spin": 2,
    "reacher_easy": 4,
    "ball_in_cup_catch": 4,
}
"""SAC-AE's tasks and their default action repeats (physics-control steps per agent step)."""

PHYSICS_STEPS = 1000
"""Physics-control steps per episode: the time limit of every task in ``DMC_TASKS``."""

MIN_IMAGE_SIZE = 15
"""Smallest frame the SAC-AE encoder takes (3x3 stride 2, three 3x3: 15 -> 7 -> 5 -> 3 -> 1)."""

_DOMAINS = ("ball_in_cup", "cartpole", "cheetah", "finger", "reacher", "walker")

# What each headless backend loads, and how to get it.
_GL_LIBRARIES = {"osmesa": "OSMesa", "egl": "EGL"}
_GL_FIXES = {
    "osmesa": "Install it with `apt-get install libosmesa6`, or set MUJOCO_GL=egl on a GPU machine",
    "egl": "Install the NVIDIA driver's EGL library (libegl1), or set MUJOCO_GL=osmesa "
           "and `apt-get install libosmesa6`",
}


def split_task(name: str) -> tuple[str, str]:
    """``"ball_in_cup_catch"`` -> ``("ball_in_cup", "catch")``; a one-line ``ValueError`` for a
    name not in ``DMC_TASKS``."""
    if name not in DMC_TASKS:
        raise ValueError(f"unknown DMC task {name!r}; choose one of {sorted(DMC_TASKS)}")
    domain = next(d for d in _DOMAINS if name.startswith(d + "_"))
    return domain, name[len(domain) + 1:]


def has_gpu() -> bool:
    """Whether an NVIDIA GPU device node is present (then EGL renders on the GPU)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def choose_gl_backend() -> str:
    """On Linux, set ``MUJOCO_GL`` (unless the user has) and a matching ``PYOPENGL_PLATFORM``;
    return the backend.

    dm_control sets ``PYOPENGL_PLATFORM`` itself when it loads the backend, but PyOpenGL fixes
    its platform on first import, so both are set here, before anything imports OpenGL.
    """
    if not sys.platform.startswith("linux"):  # macOS, Windows: dm_control's default (glfw)
        return os.environ.get("MUJOCO_GL", "glfw")
    backend = os.environ.setdefault("MUJOCO_GL", "egl" if has_gpu() else "osmesa")
    if backend in _GL_LIBRARIES:
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    return backend


def _can_load(library: str) -> bool:
    """Whether ``lib<library>.so`` (or ``.so.N``) loads, tried the way PyOpenGL tries it."""
    for suffix in ["", *(f".{i}" for i in range(9, -1, -1))]:
        try:
            ctypes.CDLL(f"lib{library}.so{suffix}")
            return True
        except OSError:
            pass
    return False


def gl_problem(backend: str) -> str | None:
    """A one-line message naming the missing library of ``backend`` and the fix, or ``None``
    when it loads (or the backend is one not checked here, e.g. ``glfw``)."""
    library = _GL_LIBRARIES.get(backend)
    if library is None or _can_load(library):
        return None
    return (f"MuJoCo cannot render: no {library} (MUJOCO_GL={backend}). "
            f"{_GL_FIXES[backend]}")


_OPEN_ENVS = weakref.WeakSet()


@functools.cache
def _close_envs_at_exit():
    """Close unclosed environments while Python's render thread still runs.

    dm_control frees rendering contexts in an ``atexit`` hook, which runs after Python has shut
    down its thread pools, and prints tracebacks. ``threading``'s exit hooks run before that,
    last registered first, so ours is registered after the thread pools' own.
    """
    import concurrent.futures.thread  # noqa: F401  (registers the thread pools' exit hook)

    def close_all():
        for env in list(_OPEN_ENVS):
            env.close()

    getattr(threading, "_register_atexit", lambda hook: None)(close_all)


def _load_suite():
    """``dm_control.suite``, imported after choosing the GL backend, with one-line errors."""
    backend = choose_gl_backend()
    problem = gl_problem(backend)
    if problem:
        raise RuntimeError(problem)
    try:
        from dm_control import suite
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "dm_control is not installed: pip install -e '.[dmc]'") from err
    _close_envs_at_exit()
    return suite


class DMCEnv:
    """A DeepMind Control Suite task with ``(image_size, image_size, 3)`` uint8 frames as
    observations; ``DMCEnv("cartpole_swingup", image_size=84)``."""

    name: str
    """Task name, a key of ``DMC_TASKS``."""
    image_size: int
    """Side of the square rendered frame, in pixels (at least ``MIN_IMAGE_SIZE``)."""
    action_repeat: int
    """Physics-control steps per agent step; the agent's reward is their sum."""
    episode_steps: int
    """Agent steps per episode, ``PHYSICS_STEPS // action_repeat``."""
    action_size: int
    """Dimension of the action."""

    def __init__(self, name: str, image_size: int = 84, action_repeat: int | None = None,
                 seed: int = 0, camera_id: int = 0):
        domain, task = split_task(name)  # before dm_control loads: fail fast on a typo
        if action_repeat is None:
            action_repeat = DMC_TASKS[name]
        if not isinstance(image_size, int) or image_size < MIN_IMAGE_SIZE:
            raise ValueError(
                f"image_size must be an integer >= {MIN_IMAGE_SIZE}, got {image_size!r}")
        if not isinstance(action_repeat, int) or not 1 <= action_repeat <= PHYSICS_STEPS:
            raise ValueError(
                f"action_repeat must be an integer in [1, {PHYSICS_STEPS}], got {action_repeat!r}")
        self.name, self.image_size, self.action_repeat = name, image_size, action_repeat
        self.camera_id = camera_id
        self.episode_steps = PHYSICS_STEPS // action_repeat
        self._env = _load_suite().load(domain, task, task_kwargs={"random": seed})
        spec = self._env.action_spec()
        self.action_size = int(np.prod(spec.shape))
        self._low, self._high = spec.minimum, spec.maximum
        self._t = 0
        _OPEN_ENVS.add(self)

    def _render(self) -> np.ndarray:
        return self._env.physics.render(
            height=self.image_size, width=self.image_size, camera_id=self.camera_id)

    def reset(self) -> np.ndarray:
        """Start a new episode (a new random initial state); return its first frame."""
        self._env.reset()
        self._t = 0
        return self._render()

    def step(self, action) -> tuple[np.ndarray, float, bool]:
        """Repeat ``action`` (in ``[-1, 1]^A``, clipped) ``action_repeat`` times; return the frame
        after the last repeat, the summed reward and whether the episode's time is up."""
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.action_size), -1, 1)
        action = self._low + (action + 1.0) * 0.5 * (self._high - self._low)
        reward = 0.0
        for _ in range(self.action_repeat):
            time_step = self._env.step(action)
            reward += time_step.reward or 0.0
        self._t += 1
        return self._render(), float(reward), self._t >= self.episode_steps

    def __repr__(self) -> str:
        return (f"DMCEnv({self.name!r}, image_size={self.image_size}, "
                f"action_repeat={self.action_repeat}, camera_id={self.camera_id})")

    def seed(self, seed: int) -> None:
        """Reseed the task's random initial states (the next ``reset`` uses it)."""
        self._env.task.random.seed(seed)

    def close(self):
        """Free the rendering context."""
        self._env.physics.free()
        _OPEN_ENVS.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_dmc(name: str, *, image_size: int, action_repeat: int | None = None,
             seed: int = 0) -> DMCEnv:
    """The DMC task ``name`` rendering ``image_size`` square frames; ``action_repeat=None``
    keeps the task's default (``DMC_TASKS``)."""
    return DMCEnv(name, image_size=image_size, action_repeat=action_repeat, seed=seed)
