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

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "CONTROL_TASKS": ".control",
    "CartpoleState": ".cartpole",
    "CartpoleSwingup": ".cartpole",
    "ControlTask": ".control",
    "DMCEnv": ".dmc",
    "DMCStates": ".dmc_states",
    "DMC_TASKS": ".dmc",
    "ENVS": ".registry",
    "MINATAR_GAMES": ".minatar:GAMES",
    "MIN_IMAGE_SIZE": ".render",
    "MinAtarState": ".minatar",
    "MinAtarStep": ".minatar",
    "MinAtarTask": ".minatar",
    "PendulumState": ".pendulum",
    "PendulumSwingup": ".pendulum",
    "frame_stack_indices": ".frames",
    "make": ".registry",
    "make_dmc": ".dmc",
    "make_dmc_states": ".dmc_states",
    "random_episode_return": ".rollout",
    "stack_frames": ".frames",
    "tolerance": ".rewards",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
