"""An automatic partitioner's search space and its compiler-measured cost.

automap (Schaarschmidt et al., "Automap: Towards Ergonomic Automated Parallelism for ML
Models", arXiv 2112.02958) searches over partitioning decisions and lets propagation
tactics carry each decision through the program. Here JAX's own partitioner (GSPMD) plays
the part of the propagation: given a ``PartitionSpec`` for every parameter, the batch split
over ``"data"`` and the gradients constrained to the parameters' layouts, it lays out every
other array of the train step and inserts the collectives. So a layout is one spec per
parameter, and a compiled program prices it (``lab.parallel.cost``), never run.

- ``space(model, mesh, include=..., tie=..., axes=...)``: the decisions. Each decided leaf
  (by default every array of two or more dimensions) is replicated or has one dimension
  split over one mesh axis, where the axis's size divides it. Leaves with the same ``tie``
  key are one decision; by default (``untied``) each leaf is its own. The Transformer's
  queries, keys and values come from one fused weight (``attention.qkv``, Megatron-LM's
  per-head layout), so they are one decision; its row split over heads that divide over
  the axis gives each device whole heads, as Megatron does. A ``bias`` follows its
  sibling ``weight``: split over the axis that splits the weight's output rows
  (``eqx.nn.Linear``'s weight is ``(out, in)``), else replicated. Everything else is
  replicated.
- ``Layout``: the spec of every parameter path (``jax.tree_util.keystr``), readable as a
  table; ``layout.spec(path, x)`` also lays out an optimizer state that mirrors the model
  (Adam's ``mu`` and ``nu`` sit at paths ending in the model's). ``lab.parallel`` takes
  one in place of its shape heuristic ``param_spec``.
- ``train_step(loss, optimizer, constrain)``: the optax step that is compiled, with the
  gradients passed through ``constrain``.
- ``Scorer``: compiles that step for a layout (model, optimizer state and batch as sharded
  shapes, gradients and outputs constrained to the layout) and reads a ``Cost``: collective
  bytes and count per device, per-device bytes, flops. Cached by layout, so searches that
  share a scorer compile each layout once.
- ``Objective``: infinite over a per-device byte budget, else collective bytes plus
  ``memory_weight`` times per-device bytes; ``AlphaBeta``: an alpha-beta time model,
  ``alpha`` per collective, ``beta`` per byte and the compiled flops at ``flop_rate``.

The searchers over a space are in ``lab.parallel.search``.
"""

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lab.parallel import BATCH, param_spec
from lab.parallel import cost as costs
from lab.parallel.compiled import FAST, abstract, compile_program, is_shape

MiB = 2 ** 20


def keystr(path) -> str:
    """A leaf's path as ``jax.tree_util.keystr`` writes it: ``.blocks[0].mlp_in.weight``."""
    return jax.tree_util.keystr(path)


def split(ndim: int, dim: int | None, axis: str | None) -> P:
    """The spec that splits dimension ``dim`` of an ``ndim`` array over ``axis`` (one entry
    per dimension, so equal layouts compare equal); ``P()`` when ``dim`` is None."""
    if dim is None:
        return P()
    return P(*(axis if i == dim else None for i in range(ndim)))


def show(spec: P) -> str:
    """``P('model', None)``: a spec as it is written in code."""
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def untied(path: str) -> str:
    """Every leaf its own decision."""
    return path


def matrices(path: str, x) -> bool:
    """The default leaves to decide: arrays of two or more dimensions."""
    return len(x.shape) >= 2


@dataclasses.dataclass(frozen=True)
class Layout:
    """A ``PartitionSpec`` for every parameter path of a model, in tree order."""

    specs: tuple[tuple[str, P], ...]

    def __getitem__(self, path: str) -> P:
        return dict(self.specs)[path]

    def spec(self, path, x) -> P:
        """The spec of the leaf ``x`` at ``path`` (a key path or its ``keystr``) of the model
        or of a tree that mirrors it: the longest model path that ends the leaf's path, if
        its spec fits ``x``'s dimensions; replicated otherwise (Adam's step count)."""
        path = path if isinstance(path, str) else keystr(path)
        best = ("", P())
        for model_path, spec in self.specs:
            if path.endswith(model_path) and len(model_path) > len(best[0]):
                best = (model_path, spec)
        spec = best[1]
        return spec if len(spec) <= len(x.shape) else P()

    def tree(self, tree):
        """``tree`` with each array leaf replaced by its spec (None elsewhere)."""
        return jax.tree_util.tree_map_with_path(
            lambda p, x: self.spec(p, x) if is_shape(x) else None, tree, is_leaf=is_shape)

    def table(self) -> str:
        """One line per parameter: its path and its spec."""
        width = max(len(p) for p, _ in self.specs)
        return "\n".join(f"{p.ljust(width)}  {show(s)}" for p, s in self.specs)

    def __str__(self) -> str:
        return self.table()


@dataclasses.dataclass(frozen=True)
class Decision:
    """One choice of the search: the leaves it lays out (same shape) and their options,
    ``options[0]`` replicated."""

    name: str
    paths: tuple[str, ...]
    shape: tuple[int, ...]
    options: tuple[P, ...]


@dataclasses.dataclass(frozen=True)
class Space:
    """The decisions over a model's parameters; a choice is one option index per decision."""

    decisions: tuple[Decision, ...]
    leaves: tuple[tuple[str, tuple[int, ...]], ...]  # every array leaf: path, shape

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(d.options) for d in self.decisions)

    @property
    def size(self) -> int:
        """The number of layouts: the product of the option counts."""
        return math.prod(self.sizes)

    @property
    def replicated(self) -> tuple[int, ...]:
        return (0,) * len(self.decisions)

    def layout(self, choice: Sequence[int]) -> Layout:
        """The layout of ``choice``: decided leaves by their option, a ``bias`` by its
        sibling ``weight``'s output split, the rest replicated."""
        decided = {path: d.options[o] for d, o in zip(self.decisions, choice, strict=True)
                   for path in d.paths}
        specs = []
        for path, shape in self.leaves:
            spec = decided.get(path, P())
            weight = path.removesuffix(".bias") + ".weight"
            if path.endswith(".bias") and weight in decided and len(shape) == 1:
                rows = decided[weight]
                spec = P(rows[0]) if len(rows) and rows[0] is not None else P()
            specs.append((path, spec))
        return Layout(tuple(specs))

    def choice(self, spec: Callable[[str, tuple[int, ...]], P]) -> tuple[int, ...]:
        """The choice whose decisions take ``spec(path, shape)`` of their first leaf (a
        named layout written as a rule); a ValueError when that spec is not an option."""
        chosen = []
        for d in self.decisions:
            want = spec(d.paths[0], d.shape)
            want = P(*want, *(None,) * (len(d.shape) - len(want))) if len(want) else P()
            if want not in d.options:
                raise ValueError(f"{show(want)} is not an option of {d.name}: "
                                 f"{', '.join(show(o) for o in d.options)}")
            chosen.append(d.options.index(want))
        return tuple(chosen)


def space(model, mesh: Mesh, *, include: Callable[[str, object], bool] = matrices,
          tie: Callable[[str], str] = untied, axes: Sequence[str] | None = None) -> Space:
    """The decisions over ``model``'s array leaves (arrays or shapes) on ``mesh``: see the
    module docstring. ``axes`` are the mesh axes a leaf may be split over (by default every
    axis of size above 1). A one-line ValueError, before any compile, for an axis that is
    not in the mesh or whose size divides no dimension of a decided leaf."""
    axes = [a for a in mesh.axis_names if mesh.shape[a] > 1] if axes is None else list(axes)
    for a in axes:
        if a not in mesh.shape:
            raise ValueError(f"unknown mesh axis {a!r}; the mesh has {', '.join(mesh.axis_names)}")
    leaves, groups = [], {}
    for path, x in jax.tree_util.tree_flatten_with_path(
            eqx.filter(model, is_shape, is_leaf=is_shape), is_leaf=is_shape)[0]:
        name = keystr(path)
        leaves.append((name, tuple(x.shape)))
        if include(name, x):
            groups.setdefault(tie(name), []).append((name, tuple(x.shape)))
    decisions = []
    for name, members in groups.items():
        shapes = {shape for _, shape in members}
        if len(shapes) > 1:
            raise ValueError(f"tied leaves of {name} differ in shape: {sorted(shapes)}; "
                             "tie only leaves of one shape")
        shape = members[0][1]
        options = [P()] + [split(len(shape), d, a) for a in axes for d in range(len(shape))
                           if shape[d] % mesh.shape[a] == 0]
        decisions.append(Decision(name, tuple(p for p, _ in members), shape, tuple(options)))
    for a in axes:
        if not any(a in o for d in decisions for o in d.options):
            raise ValueError(f"mesh axis {a!r} (size {mesh.shape[a]}) divides no dimension of "
                             f"the searched parameters; use a size that divides them or leave "
                             f"{a!r} out of axes")
    return Space(tuple(decisions), tuple(leaves))


def heuristic(mesh: Mesh) -> Callable[[str, tuple[int, ...]], P]:
    """``lab.parallel.param_spec`` (the shape heuristic) as a rule for ``Space.choice``."""
    model = mesh.shape.get("model", 1)
    return lambda path, shape: param_spec(np.zeros(shape, np.int8), model)


# the compiled train step and its cost --------------------------------------------------------

def train_step(loss: Callable, optimizer: optax.GradientTransformation,
               constrain: Callable = lambda tree: tree) -> Callable:
    """``step(model, opt_state, batch) -> (model, opt_state, loss)``: the gradient of
    ``loss(model, batch)``, passed through ``constrain``, then one optax update."""

    def step(model, opt_state, batch):
        value, grads = eqx.filter_value_and_grad(loss)(model, batch)
        grads = constrain(grads)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, value

    return step


def constrainer(mesh: Mesh, layout: Layout) -> Callable:
    """Inside jit: every array leaf of a tree (model, gradients, optimizer state) laid out
    by ``layout`` (``with_sharding_constraint``)."""
    def constrain(tree):
        return jax.tree_util.tree_map_with_path(
            lambda p, x: jax.lax.with_sharding_constraint(
                x, NamedSharding(mesh, layout.spec(p, x))) if eqx.is_array(x) else x, tree)
    return constrain


class Cost(NamedTuple):
    """What one compiled train step costs, per device."""

    collective_bytes: int  # put into collectives, summed over executions
    collectives: int  # executions of collectives
    memory: int  # arguments + outputs + temporaries - aliases
    flops: float
    seconds: float  # to lower and compile it


class Scorer:
    """Prices layouts of ``loss``'s train step with ``optimizer`` on ``mesh``; ``model`` and
    ``batch`` may be arrays or ``ShapeDtypeStruct``s. The batch's leaves are split by
    ``batch_spec`` (the leading axis over ``"data"``). ``compiles`` and ``seconds`` count
    the cache misses.

    With a ``store`` (a ``lab.train.checkpoint.Kept``: a folder of results, one file per key)
    each price is also kept there, one file per layout, and a layout priced in an earlier
    process is read back instead of compiled (``loaded`` counts those):
    a run stopped at a deadline and resumed replays its deterministic searches from the
    kept prices, to the same figures. A loaded price counts in ``compiles`` and ``seconds``
    with the seconds it took when it was compiled. The folder must belong to this scorer's
    problem alone (the caller names it by everything that defines the programs)."""

    def __init__(self, loss: Callable, optimizer: optax.GradientTransformation, model, batch,
                 mesh: Mesh, *, batch_spec: P = BATCH, compiler_options: dict | None = FAST,
                 store: Any = None):
        self.model = eqx.filter_eval_shape(lambda: model)
        self.opt_state = eqx.filter_eval_shape(
            lambda m: optimizer.init(eqx.filter(m, eqx.is_array)), model)
        self.batch = jax.eval_shape(lambda: batch)
        self.loss, self.optimizer, self.mesh = loss, optimizer, mesh
        self.batch_spec, self.compiler_options = batch_spec, compiler_options
        self.cache: dict[Layout, Cost] = {}
        self.compiles, self.seconds = 0, 0.0
        self.store = store

    @property
    def loaded(self) -> int:
        """Prices read back from ``store`` rather than compiled."""
        return 0 if self.store is None else self.store.loaded

    def compile(self, layout: Layout):
        """The train step compiled under ``layout``, never run."""
        constrain = constrainer(self.mesh, layout)
        step = train_step(self.loss, self.optimizer, constrain)

        def program(model, opt_state, batch):
            model, opt_state, value = step(model, opt_state, batch)
            return (eqx.filter(constrain(model), eqx.is_array),
                    eqx.filter(constrain(opt_state), eqx.is_array), value)

        return compile_program(program, abstract(self.model, self.mesh, layout.tree(self.model)),
                               abstract(self.opt_state, self.mesh, layout.tree(self.opt_state)),
                               abstract(self.batch, self.mesh, self.batch_spec),
                               compiler_options=self.compiler_options)

    def __call__(self, layout: Layout) -> Cost:
        if layout not in self.cache:
            cost = (self._price(layout) if self.store is None else
                    Cost(**self.store(layout.table(), lambda: self._price(layout)._asdict())))
            self.cache[layout] = cost
            self.compiles += 1
            self.seconds += cost.seconds
        return self.cache[layout]

    def _price(self, layout: Layout) -> Cost:
        start = time.perf_counter()
        compiled = self.compile(layout)
        found = costs.collectives(compiled)
        seconds = time.perf_counter() - start
        return Cost(sum(c.bytes * c.count for c in found), sum(c.count for c in found),
                    costs.memory(compiled).total, costs.flops(compiled), seconds)


@dataclasses.dataclass(frozen=True)
class Objective:
    """``collective_bytes + memory_weight * memory`` (bytes per device); infinite when
    ``memory`` exceeds ``budget``. Lower is better."""

    budget: float = math.inf  # per-device bytes
    memory_weight: float = 0.01

    def unbudgeted(self, cost: Cost) -> float:
        return cost.collective_bytes + self.memory_weight * cost.memory

    def __call__(self, cost: Cost) -> float:
        return math.inf if cost.memory > self.budget else self.unbudgeted(cost)


@dataclasses.dataclass(frozen=True)
class AlphaBeta:
    """Seconds per step: ``alpha`` per collective plus ``beta`` per collective byte plus
    the compiled flops at ``flop_rate`` (XLA counts a loop body once); infinite over
    ``budget``. The defaults are of the order of a GPU node (10 us, 100 GB/s, 100 TFLOP/s)."""

    budget: float = math.inf
    alpha: float = 1e-5
    beta: float = 1e-11
    flop_rate: float = 1e14

    def unbudgeted(self, cost: Cost) -> float:
        return (self.alpha * cost.collectives + self.beta * cost.collective_bytes
                + cost.flops / self.flop_rate)

    def __call__(self, cost: Cost) -> float:
        return math.inf if cost.memory > self.budget else self.unbudgeted(cost)


def choices(space: Space):
    """Every choice of ``space``, in order (``itertools.product`` of the options)."""
    return itertools.product(*(range(n) for n in space.sizes))
