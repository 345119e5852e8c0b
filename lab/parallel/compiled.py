"""Programs compiled from shapes, never run: how a layout is priced before any device time.

- ``shapes(build, optimizer)``: the ``ShapeDtypeStruct`` tree of ``build()``'s model and of
  its optimizer state, nothing allocated (``eqx.filter_eval_shape``).
- ``abstract(tree, mesh, specs)``: the array leaves of ``tree`` as ``ShapeDtypeStruct``
  carrying ``NamedSharding(mesh, spec)`` (one spec for all, or a matching tree of specs).
- ``compile_program(fn, *trees, compiler_options=None)``: ``fn(*trees)`` lowered and
  compiled; ``ShapeDtypeStruct`` and array leaves are the program's inputs, with their
  shardings, everything else is static. ``lab.parallel.cost`` reads the result.

``FAST`` compiles with LLVM's optimisation level 0: XLA's HLO passes, the SPMD partitioner
and buffer assignment are the same, so the collectives and per-device bytes are those of
the default compile (a test checks this), only the machine code is slower, and a one-block
Transformer step compiles in 0.85 s instead of 1.3 s on this machine.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

FAST = {"xla_backend_optimization_level": 0}


def shapes(build: Callable, optimizer: optax.GradientTransformation):
    """The shapes of ``build()``'s model and of ``optimizer``'s state for it."""
    def init():
        model = build()
        return model, optimizer.init(eqx.filter(model, eqx.is_array))
    return eqx.filter_eval_shape(init)


def is_shape(x) -> bool:
    """A leaf that becomes a program input: a ``ShapeDtypeStruct`` or an array."""
    return isinstance(x, jax.ShapeDtypeStruct | jax.Array)


def abstract(tree, mesh: Mesh, specs):
    """Array leaves of ``tree`` as ``ShapeDtypeStruct`` laid out by ``specs`` (a matching
    tree of PartitionSpecs, or one spec for every leaf); other leaves kept."""
    if isinstance(specs, P):
        specs = jax.tree.map(lambda x: specs if is_shape(x) else None, tree, is_leaf=is_shape)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, s))
        if is_shape(x) else x, tree, specs, is_leaf=is_shape)


def compile_program(fn: Callable, *trees, compiler_options: dict | None = None) -> Any:
    """``fn(*trees)`` compiled, never run: ``trees`` hold ``ShapeDtypeStruct`` leaves with
    shardings (or arrays), other leaves are static."""
    dynamic, static = eqx.partition(trees, is_shape, is_leaf=is_shape)
    lowered = jax.jit(lambda d: fn(*eqx.combine(d, static))).lower(dynamic)
    return lowered.compile(compiler_options=compiler_options)
