"""Pixel control tasks as pure JAX functions, in the style of gymnax.

An environment is a frozen dataclass of its configuration with ``reset(key) -> (state, obs)``
and ``step(state, action, key) -> (state, obs, reward, done)`` over a NamedTuple state; the
observation is the rendered ``(image_size, image_size, 3)`` uint8 frame. Everything jits and
vmaps, so environment, replay and updates can run inside one ``lax.scan``. Episodes have a
fixed length of ``env.episode_steps`` agent steps and ``step`` does not reset: after ``done``,
call ``reset`` (inside jit, choose between the two states with ``jnp.where``). Frames are not
stacked here; see ``lab.envs.frames``.

``lab.envs.dmc`` has the DeepMind Control Suite through dm_control (the ``dmc`` extra) with the
same observations, stepped on the host in numpy: ``make_dmc("cheetah_run", image_size=84)``.
dm_control is imported only when such an environment is made.

``lab.envs.control.ControlTask`` wraps gymnax's continuous-control tasks (Pendulum-v1,
MountainCarContinuous-v0) from states, with actions in ``[-1, 1]``, for the policy-improvement
agents; gymnax is imported only when one is made. ``lab.envs.minatar.MinAtarTask`` wraps
gymnax's MinAtar games (discrete actions, auto-reset, terminated and truncated apart,
optional sticky actions) for the actor-critic agents, and ``HostMinAtar`` the same games in
MinAtar's numpy; ``lab.envs.atari.HostAtari`` is real Atari through ale-py with the standard
preprocessing (the ``atari`` extra), stepped on the host like ``HostMinAtar``.
"""

from lab.envs.cartpole import CartpoleState, CartpoleSwingup
from lab.envs.control import CONTROL_TASKS, ControlTask
from lab.envs.dmc import DMC_TASKS, DMCEnv, make_dmc  # imports dm_control only when used
from lab.envs.dmc_states import DMCStates, make_dmc_states
from lab.envs.frames import frame_stack_indices, stack_frames
from lab.envs.minatar import GAMES as MINATAR_GAMES
from lab.envs.minatar import MinAtarState, MinAtarStep, MinAtarTask
from lab.envs.pendulum import PendulumState, PendulumSwingup
from lab.envs.registry import ENVS, make
from lab.envs.render import MIN_IMAGE_SIZE
from lab.envs.rewards import tolerance
from lab.envs.rollout import random_episode_return

__all__ = [
    "CONTROL_TASKS",
    "DMC_TASKS",
    "ENVS",
    "MINATAR_GAMES",
    "MIN_IMAGE_SIZE",
    "CartpoleState",
    "CartpoleSwingup",
    "ControlTask",
    "DMCEnv",
    "DMCStates",
    "MinAtarState",
    "MinAtarStep",
    "MinAtarTask",
    "PendulumState",
    "PendulumSwingup",
    "frame_stack_indices",
    "make",
    "make_dmc",
    "make_dmc_states",
    "random_episode_return",
    "stack_frames",
    "tolerance",
]
