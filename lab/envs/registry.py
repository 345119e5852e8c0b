"""Environments by name: ``make("cartpole_swingup", image_size=84)``."""

from lab.envs.cartpole import CartpoleSwingup
from lab.envs.pendulum import PendulumSwingup

ENVS = {"pendulum_swingup": PendulumSwingup, "cartpole_swingup": CartpoleSwingup}


def make(name: str, *, image_size: int, action_repeat: int | None = None):
    """The environment ``name`` rendering ``image_size`` square frames; ``action_repeat=None``
    keeps the task's default (pendulum 4, cartpole 8)."""
    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVS)}")
    if action_repeat is None:
        return ENVS[name](image_size=image_size)
    return ENVS[name](image_size=image_size, action_repeat=action_repeat)
