"""An automatic partitioner (automap, arXiv 2112.02958) measured on simulated devices.

The studies of notebook 10, each a function of a ``Setup`` (the notebook's parameters):

1. ``named``: the cost of named layouts of one Transformer block's train step (Megatron,
   ``lab.parallel``'s shape heuristic, Megatron in the MLP only, pure data parallelism).
2. ``exhaustive_block``: every layout of one block; is Megatron the unique optimum.
3. ``stacks``: 2-layer (and, in a preset, 4-layer) stacks, where exhaustive search is out
   of reach: each searcher at the same compile budget over several seeds; the fraction of
   searches whose best layout is Megatron in every layer and the compiles to the first hit.
4. ``regime``: the optimum (greedy search) over batch x sequence and the per-device budget:
   data parallel, Megatron or mixed.
5. ``exactness``: the found layout's train step run on the devices against the unsharded
   step.

The model is ``lab.models.transformer.Transformer``; the decisions are its blocks' weight
matrices (queries, keys and values come from one fused weight: one decision), everything
else replicated; the batch is split over ``"data"`` of a ``data x model`` mesh. Every cost
is read from a compiled program (``lab.parallel.cost``): simulated devices share this
machine's cores, so throughput cannot be measured here, only bytes.

The claims are declared once in ``CLAIMS`` and decided by the shared rule
(``lab.runs.verdict``): checks for the deterministic costs and searches, and one claim per
random searcher whose unit is one search (a seed on one stack depth).
"""

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lab import parallel
from lab.experiments.sequence_parallel import simulate_devices  # noqa: F401 (the notebook calls it)
from lab.models import transformer as transformer_module
from lab.models.transformer import Transformer
from lab.parallel import automap, search
from lab.parallel import cost as cost_module
from lab.parallel.megatron import is_megatron, megatron_layers, spec_of
from lab.runs.claims import (
    CHECK,
    GREATER,
    LESS,
    THRESHOLD,
    Declaration,
    declarations,
    judge,
    plural,
    said,
)
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.runs.records import spread_curve
from lab.train import automap as train
from lab.train import checkpoint as checkpoints

PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # 2- and 4-layer stacks with larger budgets and more seeds, and the block's space with
    # the data axis too (625 layouts): about 40 minutes on the 2-core CPU
    "claim": {"stack_layers": [2, 4], "budget": 60, "seeds": 2,
              "exhaustive_axes": ["model", "data"], "checkpoint": True},
    # the lent GPU machine's 16 cores: a wider model and the same searches
    "gpu": {"hidden": 1024, "stack_layers": [2, 4], "budget": 200, "seeds": 5,
            "exhaustive_axes": ["model", "data"], "checkpoint": True},
}
PARAMETERS = ("preset", "devices", "model_devices", "vocab", "hidden", "heads", "batch",
              "length", "axes", "exhaustive_axes", "memory_weight", "stack_layers", "budget",
              "seeds", "searchers", "exploration", "regime_batch", "regime_length",
              "regime_budgets", "regime_compiles", "exhaustive_limit", "seed", "checkpoint")
SEARCHERS = ("greedy", "random", "mcts", "mcts-default")
NAMED = ("Megatron", "heuristic", "MLP only", "data parallel")


@dataclasses.dataclass(frozen=True)
class Setup:
    """The notebook's parameters, validated."""

    devices: int  # simulated CPU devices: a data x model mesh
    model_devices: int  # the model axis (Megatron's devices)
    vocab: int
    hidden: int
    heads: int
    batch: int
    length: int
    axes: tuple[str, ...]  # mesh axes a weight may be split over in the searches
    exhaustive_axes: tuple[str, ...]  # ... in the exhaustive search over one block
    memory_weight: float  # score = collective bytes + memory_weight * per-device bytes
    stack_layers: tuple[int, ...]
    budget: int  # compiles per search
    seeds: int
    searchers: tuple[str, ...]
    exploration: float  # MCTS's UCT constant
    regime_batch: tuple[int, ...]
    regime_length: tuple[int, ...]
    regime_budgets: tuple[float, ...]  # per-device budgets, fractions of data parallel's
    regime_compiles: int  # greedy's compiles per cell of the regime map
    exhaustive_limit: int  # the block's exhaustive search runs up to this many layouts
    seed: int
    checkpoint: bool = False  # keep every priced layout: a resumed run replays its searches

    @property
    def objective(self) -> automap.Objective:
        return automap.Objective(memory_weight=self.memory_weight)


def configure(**params: Any) -> Setup:
    """The notebook's parameters (``PARAMETERS``) as a ``Setup``; a one-line ValueError
    naming a bad value, before any compilation."""
    p = with_preset(params, PRESETS)
    for name in ("devices", "model_devices", "vocab", "hidden", "heads", "batch", "length",
                 "budget", "seeds", "regime_compiles"):
        if p[name] < 1:
            raise ValueError(f"{name} must be at least 1, got {p[name]}")
    if p["devices"] % p["model_devices"]:
        raise ValueError(f"model_devices {p['model_devices']} does not divide the "
                         f"{p['devices']} devices; use a divisor of {p['devices']}")
    data = p["devices"] // p["model_devices"]
    for name in ("axes", "exhaustive_axes"):
        for axis in p[name]:
            if axis not in ("data", "model"):
                raise ValueError(f"unknown mesh axis {axis!r} in {name}; choose data or model")
    for searcher in p["searchers"]:
        if searcher not in SEARCHERS:
            raise ValueError(f"unknown searcher {searcher!r}; choose from "
                             f"{', '.join(SEARCHERS)}")
    if p["hidden"] % p["heads"] or p["heads"] % p["model_devices"]:
        raise ValueError(f"hidden {p['hidden']} must divide into {p['heads']} heads, and the "
                         f"heads over {p['model_devices']} model devices")
    for name, sizes in (("batch", [p["batch"], *p["regime_batch"]]),):
        for b in sizes:
            if b % data:
                raise ValueError(f"{name} {b} does not divide over {data} data devices; use a "
                                 f"multiple of {data}")
    if any(n < 1 for n in p["stack_layers"]):
        raise ValueError(f"stack_layers must be at least 1, got {p['stack_layers']}")
    if any(not 0 < f for f in p["regime_budgets"]) or p["memory_weight"] < 0 \
            or p["exploration"] < 0:
        raise ValueError("regime_budgets must be positive fractions, memory_weight and "
                         "exploration at least 0")
    return Setup(p["devices"], p["model_devices"], p["vocab"], p["hidden"], p["heads"],
                 p["batch"], p["length"], tuple(p["axes"]), tuple(p["exhaustive_axes"]),
                 float(p["memory_weight"]), tuple(p["stack_layers"]), p["budget"], p["seeds"],
                 tuple(p["searchers"]), float(p["exploration"]), tuple(p["regime_batch"]),
                 tuple(p["regime_length"]), tuple(float(f) for f in p["regime_budgets"]),
                 p["regime_compiles"], p["exhaustive_limit"], p["seed"],
                 bool(p.get("checkpoint", False)))


# the problem: a Transformer's train step on a data x model mesh ------------------------------

def mesh(setup: Setup):
    return parallel.mesh(setup.devices, model=setup.model_devices)


def build(setup: Setup, layers: int, length: int | None = None, key=None) -> Transformer:
    length = length or setup.length
    return Transformer(setup.vocab, setup.vocab, setup.hidden, setup.heads, layers, length,
                       key=jax.random.key(0) if key is None else key)


def blocks_only(path: str, x) -> bool:
    """The searched leaves: the blocks' weight matrices."""
    return ".blocks[" in path and len(x.shape) == 2


@dataclasses.dataclass
class Problem:
    """One model size on the mesh: its search space and a scorer (with its cache)."""

    layers: int
    batch: int
    length: int
    space: automap.Space
    scorer: automap.Scorer

    def named(self) -> dict[str, tuple[int, ...]]:
        """The named layouts as choices of this space."""
        def megatron(path, shape):
            return spec_of(path, None)

        def mlp_only(path, shape):
            return spec_of(path, None) if ".mlp_" in path else ()

        return {"Megatron": self.space.choice(megatron),
                "heuristic": self.space.choice(automap.heuristic(self.scorer.mesh)),
                "MLP only": self.space.choice(mlp_only),
                "data parallel": self.space.replicated}

    def is_megatron(self, choice) -> bool:
        return is_megatron(self.space.layout(choice))


def problem(setup: Setup, layers: int, *, batch: int | None = None, length: int | None = None,
            axes: tuple[str, ...] | None = None) -> Problem:
    """The search space and scorer of a ``layers``-deep model at ``batch x length``."""
    batch, length = batch or setup.batch, length or setup.length
    model = eqx.filter_eval_shape(lambda: build(setup, layers, length))
    tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    m = mesh(setup)
    space = automap.space(model, m, include=blocks_only, axes=axes or setup.axes)
    store = _store(model, tokens, m) if setup.checkpoint else None
    scorer = automap.Scorer(train.loss, optax.adam(1e-3), model, (tokens, tokens), m,
                            store=None if store is None else checkpoints.Kept(store))
    return Problem(layers, batch, length, space, scorer)


def _store(model, tokens, m) -> Path:
    """The folder that keeps this problem's prices (``automap.Scorer``'s ``store``), named by
    everything that defines its programs: the model's and batch's shapes, the mesh and its
    devices' kind, jax's version, and the source of the train step, the pricing and the model
    (an edit there prices again)."""
    return checkpoints.folder(
        "automap", str(jax.tree.structure(model)),
        [(x.shape, str(x.dtype)) for x in jax.tree.leaves(model)], tokens.shape, dict(m.shape),
        m.devices.flat[0].device_kind,
        checkpoints.sources(train, automap, cost_module, transformer_module))


def _row(p: Problem, objective, choice) -> dict[str, Any]:
    cost = p.scorer(p.space.layout(choice))
    return {"choice": list(choice), "score": objective(cost),
            "alpha_beta_us": 1e6 * automap.AlphaBeta()(cost),
            "collective_bytes": cost.collective_bytes, "collectives": cost.collectives,
            "memory": cost.memory, "flops": cost.flops, "megatron": p.is_megatron(choice)}


# 1. named layouts -------------------------------------------------------------------------------

def named(setup: Setup, p: Problem | None = None) -> list[dict[str, Any]]:
    """The cost of each named layout of one block."""
    p = p or problem(setup, 1)
    return [{"layout": name} | _row(p, setup.objective, choice)
            for name, choice in p.named().items()]


# 2. exhaustive search over one block -----------------------------------------------------------

def exhaustive_block(setup: Setup, axes: tuple[str, ...] | None = None
                     ) -> dict[str, Any] | None:
    """Every layout of one block over ``axes``, ranked; Megatron's rank and the margin.
    None when the space has more than ``exhaustive_limit`` layouts (the smoke run)."""
    p = problem(setup, 1, axes=axes or setup.exhaustive_axes)
    if p.space.size > setup.exhaustive_limit:
        return None
    start = time.perf_counter()
    result = search.search(p.space, p.scorer, setup.objective, "exhaustive")
    ranked = sorted(result.scored.items(), key=lambda kv: kv[1])
    megatron = p.named()["Megatron"]
    rank = next(i for i, (c, _) in enumerate(ranked) if c == megatron) + 1
    best, second = ranked[0][1], ranked[1][1]
    return {"axes": list(axes or setup.exhaustive_axes), "layouts": p.space.size,
            "seconds": time.perf_counter() - start,
            "megatron_rank": rank, "megatron_unique_optimum": rank == 1 and second > best,
            "second_over_best": second / best,
            "megatron_over_best": result.scored[megatron] / best,
            "others_over_megatron": sorted(s / result.scored[megatron]
                                           for c, s in result.scored.items() if c != megatron),
            "top": [_row(p, setup.objective, c) for c, _ in ranked[:8]],
            "scored": result.scored,
            "decisions": [d.name for d in p.space.decisions],
            "options": [[automap.show(o) for o in d.options] for d in p.space.decisions],
            "problem": p}


# 3. searches over stacks -----------------------------------------------------------------------

def searcher_options(name: str, setup: Setup) -> tuple[str, dict[str, Any]]:
    if name == "mcts-default":
        return "mcts", {"completion": "default", "exploration": setup.exploration}
    if name == "mcts":
        return "mcts", {"completion": "random", "exploration": setup.exploration}
    return name, {}


def stack_search(setup: Setup, layers: int, *,
                 on_search: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Each searcher over ``seeds`` seeds (greedy is deterministic: one run) at ``budget``
    compiles on a ``layers``-deep model; the searches share one scorer's cache."""
    p = problem(setup, layers)
    megatron = p.named()["Megatron"]
    reference = setup.objective(p.scorer(p.space.layout(megatron)))
    runs = []
    for name in setup.searchers:
        searcher, options = searcher_options(name, setup)
        for seed in range(1 if name == "greedy" else setup.seeds):
            start = time.perf_counter()
            r = search.search(p.space, p.scorer, setup.objective, searcher, setup.budget,
                              setup.seed + seed, **options)
            run = {"searcher": name, "seed": seed, "compiles": r.compiles,
                   "megatron": p.is_megatron(r.choice),
                   "megatron_layers": sum(megatron_layers(r.layout)),
                   "score_over_megatron": r.score / reference,
                   "first_hit": r.first(lambda c: c == megatron),
                   "best_over_megatron": [s / reference for s, _ in r.history],
                   "choice": list(r.choice), "seconds": time.perf_counter() - start}
            runs.append(run)
            if on_search:
                on_search(run)
    return {"layers": layers, "space": p.space.size, "budget": setup.budget, "runs": runs,
            "megatron_score": reference,
            "heuristic_over_megatron": _ratio(p, "heuristic", "Megatron"),
            "scorer_compiles": p.scorer.compiles, "scorer_seconds": p.scorer.seconds,
            "scorer_loaded": p.scorer.loaded,  # prices read back from a checkpoint
            "problem": p}


def _ratio(p: Problem, a: str, b: str) -> float:
    named = p.named()
    return (p.scorer(p.space.layout(named[a])).collective_bytes
            / p.scorer(p.space.layout(named[b])).collective_bytes)


def stacks(setup: Setup, on_search=None) -> list[dict[str, Any]]:
    return [stack_search(setup, n, on_search=on_search) for n in setup.stack_layers]


def rates(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per searcher: the fraction of its searches that found Megatron in every layer, the
    compiles to the first hit (median over the hits) and the mean final score over
    Megatron's."""
    out = {}
    for name in dict.fromkeys(r["searcher"] for r in stack["runs"]):
        rs = [r for r in stack["runs"] if r["searcher"] == name]
        hits = [r["first_hit"] for r in rs if r["megatron"]]
        out[name] = {"searches": len(rs), "found": sum(r["megatron"] for r in rs),
                     "fraction": float(np.mean([r["megatron"] for r in rs])),
                     "median_compiles_to_hit": float(np.median(hits)) if hits else None,
                     "mean_score_over_megatron": float(np.mean([r["score_over_megatron"]
                                                                for r in rs]))}
    return out


# 4. the regime map -----------------------------------------------------------------------------

def classify(p: Problem, choice) -> str:
    if all(c == 0 for c in choice):
        return "data parallel"
    return "Megatron" if p.is_megatron(choice) else "mixed"


def regime(setup: Setup, on_cell: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """For each batch x length and each per-device budget (a fraction of data parallelism's
    bytes at that size): the best layout greedy search finds from full replication, within
    ``regime_compiles`` compiles, and its class."""
    cells = []
    for batch in setup.regime_batch:
        for length in setup.regime_length:
            p = problem(setup, 1, batch=batch, length=length)
            replicated = p.scorer(p.space.layout(p.space.replicated)).memory
            for fraction in setup.regime_budgets:
                objective = dataclasses.replace(setup.objective, budget=fraction * replicated)
                cell = {"batch": batch, "length": length, "budget_fraction": fraction,
                        "budget_bytes": fraction * replicated}
                try:
                    r = search.search(p.space, p.scorer, objective, "greedy",
                                      setup.regime_compiles)
                    cell |= {"optimum": classify(p, r.choice), "choice": list(r.choice),
                             "collective_bytes": r.cost.collective_bytes,
                             "memory": r.cost.memory}
                except ValueError as error:  # nothing priced fits
                    cell |= {"optimum": "none fits", "error": str(error)}
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
    return cells


# 5. the found layout's step against the unsharded step ------------------------------------------

def exactness(setup: Setup, layout: automap.Layout, layers: int) -> dict[str, Any]:
    """One train step of a ``layers``-deep model on random tokens, unsharded on one device
    against the found ``layout`` on the mesh: the largest parameter difference after an SGD
    step (learning rate 1, so it is the gradients' difference) and after an Adam step (whose
    first update divides each gradient by its own size, so a gradient near zero turns
    rounding into a difference up to the learning rate), and the loss difference."""
    key_model, key_tokens, key_targets = jax.random.split(jax.random.key(setup.seed), 3)
    model = build(setup, layers, key=key_model)
    shape = (setup.batch, setup.length)
    batch = (jax.random.randint(key_tokens, shape, 0, setup.vocab),
             jax.random.randint(key_targets, shape, 0, setup.vocab))
    m = mesh(setup)
    out: dict[str, Any] = {}
    for name, optimizer in (("sgd", optax.sgd(1.0)), ("adam", optax.adam(1e-3))):
        opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
        one = train.make_step(optimizer)(model, opt_state, batch)
        sharded = train.make_step(optimizer, m, layout)(
            parallel.shard_params(model, m, layout), parallel.shard_params(opt_state, m, layout),
            parallel.shard_batch(batch, m))
        leaves = [jax.tree.leaves(eqx.filter(x[0], eqx.is_array)) for x in (one, sharded)]
        out[f"{name}_param_error"] = float(max(np.max(np.abs(np.asarray(a) - np.asarray(b)))
                                               for a, b in zip(*leaves, strict=True)))
        out["loss_error"] = float(abs(one[2] - sharded[2]))
        out["specs_in_use"] = sorted({str(x.sharding.spec) for x in leaves[1]})
    out["param_error"] = out["sgd_param_error"]
    return out


# claims -------------------------------------------------------------------------------------------

EXACT_ATOL = 1e-5  # float32: about 100 rounding steps (2^-23) of values of order 1
STRICT = 1 + 1e-9  # "strictly more": above a tie beyond float64 rounding of a ratio of bytes
HIT_RATE = 0.5  # the smallest fraction of searches that counts as "recovers"

PAPER = ("Schaarschmidt, Grewe, Vytiniotis, Paszke, Schmid, Norman, Molloy, Godwin, Rink, "
         "Nair & Belov, Automap: Towards Ergonomic Automated Parallelism for ML Models "
         "(arXiv 2112.02958)")
RECOVER = ("Through a combination of inductive tactics and search in a platform-independent "
           "partitioning IR, automap can recover expert partitioning strategies such as "
           "Megatron sharding for transformer layers.")
ABSTRACT_ONLY = "(not found in the stored text of the paper: only its abstract is stored) "
STRICT_SOURCE = ("a check, strictly: a ratio of byte counts of order 1e6 that differ by one "
                 "byte is 1 + 1e-6 from 1, so 1 + 1e-9 separates a tie from any difference")


def _block_optimum(name: str, axes: str, layouts: str) -> Declaration:
    return Declaration(
        name=name,
        statement=f"Megatron's layout is the unique cheapest of one Transformer block's "
                  f"{layouts} layouts over the {axes}",
        quote=ABSTRACT_ONLY + RECOVER, source="Abstract",
        unit="layout of the block other than Megatron's (exhaustive search)",
        measure="the layout's score (collective bytes + memory_weight x bytes per device) "
                "over Megatron's",
        comparison=CHECK, direction=GREATER, threshold=STRICT,
        minimum_effect_source=STRICT_SOURCE, family="block_optimum", declared_after="")


def _search_recovers(searcher: str, how: str) -> Declaration:
    return Declaration(
        name=f"search_recovers_{searcher.replace('-', '_')}",
        statement=f"{how} over per-weight shardings, scored by the compiler, finds Megatron "
                  "in every layer of a stack within the compile budget",
        quote=RECOVER, source="Abstract",
        unit="search (one seed on one stack depth; the run's depths pooled)",
        measure="1 if the search's best layout is Megatron's in every layer, else 0",
        comparison=THRESHOLD, direction=GREATER, threshold=0.0, minimum_effect=HIT_RATE,
        minimum_effect_source=f"stated: at least {HIT_RATE:g} of the searches (a search "
                              "that finds it less often than not does not recover it); the "
                              "paper gives no rate",
        family="search_recovers",
        declared_after="the 2026-11-26 runs (before: any one searcher finding it on some "
                       "seed held, marked as holding only in part unless MCTS and some searcher "
                       "found it on every seed)")


CLAIMS = declarations(
    _block_optimum("block_optimum", "model axis", "3^4 = 81"),
    _block_optimum("block_optimum_with_data_axis", "model and data axes", "5^4 = 625"),
    Declaration(
        name="search_recovers_greedy",
        statement="Greedy coordinate descent from full replication, scored by the compiler, "
                  "finds Megatron in every layer of a stack within the compile budget",
        quote=RECOVER, source="Abstract",
        unit="stack depth (greedy is deterministic: one search per depth)",
        measure="fraction of the stack's layers whose best layout is Megatron's",
        comparison=CHECK, direction=GREATER, threshold=1.0,
        minimum_effect_source="a check: every layer Megatron's",
        family="search_recovers",
        declared_after="the 2026-11-26 runs (before: pooled with the other searchers)"),
    _search_recovers("random", "Random search"),
    _search_recovers("mcts", "MCTS with random completions"),
    _search_recovers("mcts-default", "MCTS with replicated completions"),
    Declaration(
        name="less_than_heuristic",
        statement="Megatron's layout needs fewer collective bytes than lab.parallel's shape "
                  "heuristic",
        quote=ABSTRACT_ONLY + "identifying efficient partitioning strategies requires "
              "expensive experimentation and expertise.",
        source="Abstract (the heuristic stands for a partitioning chosen without search)",
        unit="model depth (one block and each searched stack; compiled programs)",
        measure="the heuristic's collective bytes per device over Megatron's",
        comparison=CHECK, direction=GREATER, threshold=STRICT,
        minimum_effect_source=STRICT_SOURCE, family="less_than_heuristic", declared_after=""),
    Declaration(
        name="exact",
        statement="The train step under the found layout equals the unsharded step",
        quote=ABSTRACT_ONLY + "Our partitioner enables SPMD-style parallelism that "
              "encompasses data parallelism and parameter/activation sharding.",
        source="Abstract",
        unit="output of one train step (the gradients, by an SGD step of learning rate 1; "
             "the loss)",
        measure="largest absolute difference, sharded on the mesh against one device",
        comparison=CHECK, direction=LESS, threshold=EXACT_ATOL,
        minimum_effect_source=f"a check: within {EXACT_ATOL:g}, about 100 float32 rounding "
                              "steps of values of order 1",
        family="exact", declared_after=""),
)
BLOCK_CLAIM = {("model",): "block_optimum", ("data", "model"): "block_optimum_with_data_axis"}


def verdict(setup: Setup, names: list[dict], block: dict, stack_results: list[dict],
            cells: list[dict], exact: dict) -> dict[str, Any]:
    """Every number of the run, per-unit numbers included (``summary`` judges the claims
    from them)."""
    m: dict[str, Any] = {"named": names}
    by = {r["layout"]: r for r in names}
    m["heuristic_over_megatron_bytes"] = (by["heuristic"]["collective_bytes"]
                                          / by["Megatron"]["collective_bytes"])
    m["data_parallel_over_megatron_bytes"] = (by["data parallel"]["collective_bytes"]
                                              / by["Megatron"]["collective_bytes"])
    timing = ("seconds", "scorer_seconds")  # recorded apart: they differ run to run
    m["block"] = block and {k: v for k, v in block.items()
                            if k not in ("problem", "scored", *timing)}
    m["block_seconds"] = block and block["seconds"]
    m["stacks"] = []
    for s in stack_results:
        r = rates(s)
        runs = [{k: v for k, v in run.items() if k not in timing} for run in s["runs"]]
        m["stacks"].append({k: v for k, v in s.items() if k not in ("problem", *timing)}
                           | {"rates": r, "runs": runs})
    m["stack_seconds"] = [s["scorer_seconds"] for s in stack_results]
    m["stack_heuristic_over_megatron_bytes"] = [s["heuristic_over_megatron"]
                                                for s in stack_results]
    m["regime"] = cells
    m["regime_classes"] = sorted({c["optimum"] for c in cells})
    m["exact"] = exact
    return m


def _fractions(m: dict[str, Any], name: str) -> str:
    return "; ".join(f"{s['layers']} layers {s['rates'][name]['found']}/"
                     f"{s['rates'][name]['searches']}" for s in m["stacks"]
                     if name in s["rates"])


def _hits(m: dict[str, Any], name: str) -> str:
    return "; ".join(f"{s['layers']} layers {s['rates'][name]['median_compiles_to_hit']:g}"
                     for s in m["stacks"] if name in s["rates"]
                     and s["rates"][name]["median_compiles_to_hit"] is not None) or "none"


def summary(m: dict[str, Any], setup: Setup) -> dict[str, Any]:
    """The claims (``CLAIMS``, judged by the shared rule from the per-unit numbers), study
    and headline for ``record``; a study the run skipped leaves its claims out. Works on
    records from before the per-unit numbers: the block's check is then decided by the
    cheapest other layout they kept (every other layout costlier exactly when it is)."""
    claims = []
    block = m["block"]
    name = BLOCK_CLAIM.get(tuple(sorted(block["axes"]))) if block else None
    if name:
        others = block.get("others_over_megatron")
        cheapest = (block["second_over_best"] if block["megatron_rank"] == 1
                    else 1 / block["megatron_over_best"])
        claims.append(judge(CLAIMS[name], others or [cheapest], numbers={
            "layouts": block["layouts"], "Megatron's rank": block["megatron_rank"],
            "cheapest other / Megatron": cheapest,
            "Megatron / best": block["megatron_over_best"],
            "compared": f"{block['layouts'] - 1} other layouts" if others else
                        "the record keeps only the cheapest other layout"}))
    searchers = dict.fromkeys(r["searcher"] for s in m["stacks"] for r in s["runs"])
    for searcher in searchers:
        runs = [(s, r) for s in m["stacks"] for r in s["runs"] if r["searcher"] == searcher]
        numbers = {"searches that found it": _fractions(m, searcher),
                   "median compiles to the first hit": _hits(m, searcher),
                   "mean best score / Megatron's": float(np.mean(
                       [r["score_over_megatron"] for _, r in runs])),
                   "budget (compiles per search)": setup.budget,
                   "layouts per stack": ", ".join(f"{s['space']:,}" for s in m["stacks"])}
        if searcher == "greedy":
            values = [r["megatron_layers"] / s["layers"] for s, r in runs]
        else:
            values = [float(r["megatron"]) for _, r in runs]
        claims.append(judge(CLAIMS[f"search_recovers_{searcher.replace('-', '_')}"], values,
                            numbers=numbers))
    claims.append(judge(
        CLAIMS["less_than_heuristic"],
        [m["heuristic_over_megatron_bytes"], *m["stack_heuristic_over_megatron_bytes"]],
        numbers={"heuristic / Megatron, one block": m["heuristic_over_megatron_bytes"],
                 "stacks": ", ".join(f"{x:.3f}" for x in m["stack_heuristic_over_megatron_bytes"]),
                 "data parallel / Megatron, one block": m["data_parallel_over_megatron_bytes"]}))
    claims.append(judge(
        CLAIMS["exact"], [m["exact"]["param_error"], m["exact"]["loss_error"]],
        numbers={"max |gradient difference| (SGD step)": m["exact"]["param_error"],
                 "|loss difference|": m["exact"]["loss_error"], "tolerance": EXACT_ATOL,
                 "max |parameter difference| after Adam's first step (not judged)":
                     m["exact"]["adam_param_error"]}))
    return claims_summary(
        paper=PAPER, paper_setting="Transformer layers partitioned in PartIR on TPU meshes",
        measured=(f"{plural(setup.devices, 'simulated CPU device')} as "
                  f"{setup.devices // setup.model_devices} x {setup.model_devices}; blocks of "
                  f"width {setup.hidden}, batch {setup.batch} x length {setup.length}; "
                  f"{plural(setup.seeds, 'seed')}; costs from compiled programs"),
        claims=claims,
        headline=["heuristic_over_megatron_bytes", "data_parallel_over_megatron_bytes"],
        labels={"heuristic_over_megatron_bytes": "bytes moved: the heuristic's over Megatron's",
                "data_parallel_over_megatron_bytes": "bytes moved: data parallel's over "
                                                     "Megatron's"})


def rederive(metrics: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's claims under today's declarations, from its recorded numbers
    (``python -m lab claims rederive``)."""
    return summary(metrics, configure(**parameters))


def describe(m: dict[str, Any], setup: Setup) -> str:
    """Each claim's verdict with its evidence, as Markdown lines (every number from ``m``)."""
    return "\n".join(f"- **{c['name']}: {said(c)}.** {c['statement']}."
                     for c in summary(m, setup)["claims"])


def curves(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What ``record(curves=...)`` stores for the compare view: per stack depth and
    searcher, the best score so far over Megatron's against compiles (mean over seeds, band
    min-max)."""
    out = {}
    for s in m["stacks"]:
        for name in s["rates"]:
            hist = [r["best_over_megatron"] for r in s["runs"] if r["searcher"] == name]
            n = min(len(h) for h in hist)
            key = f"{s['layers']}_layers_{name.replace('-', '_')}"
            out[key] = spread_curve(range(1, n + 1), [h[:n] for h in hist],
                                    xlabel="compiles", ylabel="best score / Megatron's")
    return out

