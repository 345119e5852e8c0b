"""Equinox models. Each takes one unbatched example; batch with ``jax.vmap``."""

from lab.models.feedforward import convnet, mlp

__all__ = ["convnet", "mlp"]
