"""Initial weights that compile quickly when drawn eagerly.

A model's constructor runs outside ``jit``, so each ``jax.random.normal(key, shape)`` in it
compiles a program of its own for every new shape: Threefry's rounds and the inverse error
function, whose LLVM code generation is most of a constructor's time on the CPU (0.17-0.57 s
per 2-D to 4-D shape here). :func:`normal` draws the same numbers as a flat vector and
reshapes them: JAX's partitionable Threefry (the default) numbers each element by its flat
index, so the values are bit for bit ``jax.random.normal``'s (a test checks it), the flat
program compiles in 0.15-0.18 s, and shapes with one element count share it. Inside ``jit``
either form compiles into the enclosing program; this is for eager draws. :func:`dense` is
the scaled draw the PixelCNN and WaveNet layers share."""

import math

import jax


def normal(key: jax.Array, shape: tuple[int, ...], dtype=float) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, bit for bit, drawn flat and reshaped."""
    if not jax.config.jax_threefry_partitionable:  # the flat index would not be the counter
        return jax.random.normal(key, shape, dtype)
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def dense(key: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
    """Weights ``N(0, 1 / fan_in)``: :func:`normal` scaled by ``1 / sqrt(fan_in)``."""
    return normal(key, shape) / math.sqrt(fan_in)
