"""Optimizers in the optax style."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "ProxProp": ".proxprop",
    "proximal_step": ".proxprop",
    "value_and_direction": ".proxprop",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
