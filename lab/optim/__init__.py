"""Optimizers in the optax style."""

from lab.optim.proxprop import ProxProp, proximal_step, value_and_direction

__all__ = ["ProxProp", "proximal_step", "value_and_direction"]
