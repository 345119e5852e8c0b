"""Causal model selection (Kyono & van der Schaar, arXiv 1911.12441): among many trained
networks, pick the ones that stay right under domain shift by how plausible a known causal
graph is when their predictions stand in for the target.

One **trial** (``trial`` for a synthetic SCM, ``diabetes_trial`` for the real data):

1. data from the training domain, split into a training set, a stopping set (early
   stopping, as the official code's Keras models do) and a selection (validation) set,
   standardised with the training set's mean and standard deviation;
2. ``candidates`` MLPs that differ only in their seed, trained together (``vmap``, one jit)
   on every variable but the target, each keeping its best weights on the stopping set;
3. per candidate, on the selection set: the validation error (MSE) and the causal score
   (``lab.causal.select.causal_scores``) of the true graph and of an impostor graph, with
   the graph fixed and with a structure search that requires the graph's edges;
4. per candidate, on each shifted test domain: the out-of-domain (OOD) error;
5. per **rule** (validation error, the combined score with each graph and mode, the oracle
   that sees the OOD errors): the mean OOD error of its top ``top_fraction`` of candidates,
   and the rank correlation of its score with the OOD error.

The synthetic protocol follows the official code's: a random DAG, a sink with a parent as the
target, every other variable an input; the test domains shift every variable's noise (``all``)
or one input's (``one``) to mean ``shift_mean`` and ``shift_scale`` times the standard
deviation. The real data: scikit-learn's diabetes table, tiers age and sex, then the clinical
measurements, then the target; the known graph is GES's on all rows under those tiers;
the shift holds out the 20% of rows with the smallest or largest value of a random input.

``study`` runs the trials; ``verdict`` gathers the run's numbers, among them one row per
trial (``per_trial``) that the claims are judged from; ``summary`` judges the claims
(``CLAIMS``) by the shared rule (``lab.runs.verdict``): per independent unit (a synthetic
trial, which draws its own graph, SCM, data and candidates; on the diabetes table a held-out
domain) the log of the top k's out-of-domain MSE, the causal choice paired with validation
error's on the same units, a smallest gain of 1% declared. The headline is judged on the
linear cells (the paper's setting); the nonlinear cells, our floored score and the diabetes
table are claims of the same family, corrected together. ``paired`` and ``table`` describe
each cell and shift (win counts, a Wilcoxon p) without deciding anything. ``shrinkage``
measures the prediction spread of each rule's choice (the fixed-graph score without a floor
falls by ``2 n log(1/alpha)`` when predictions shrink by ``alpha``).

**The ``paper`` preset** is the official code's synthetic study (``alg/CausalAssurance/
submission/Synthetic.ipynb`` and ``causal_assurance.py`` of vanderschaarlab/mlforhealthlabpub)
trial for trial: 4 nodes, DAGs from its ``random_dag`` (``official_dag``: 4 to 16 random pairs;
the impostor 0 to 16), unit weights and standard normal noise, 6,000 / 2,000 / 2,000 rows
unstandardised, 100 Keras-like MLPs 512-256 (ReLU, Glorot-uniform, zero biases; its dropout is
called with ``training=False`` and never drops), SGD 1e-4 with momentum 0.9, batch 32, at most
20 epochs of 188 steps, early stopping with patience 2 and min_delta 1e-4, 2,000 test rows per
shift at mean 1 and standard deviation 2, top 10%, ``lam="ancestors"``; the official sign is
the rule ``flipped_search``. Its deviations from the official code:

- 3 repeats, not 100: one trial took 896 s timed alone here (7.3 minutes in the recorded run);
- the search is ``lab.causal.ges`` (GES with the true edges required) on the plain BIC, not
  Tetrad's FGES on its SEM BIC (the call leaves the penalty discount at Tetrad's default); like
  Tetrad's, the rules ``causal_*``, ``impostor_*`` and ``flipped_search`` put no floor under
  the stand-in target (a numerical one only, ``lab.causal.score.NUMERICAL_FLOOR``); our
  floored score is the separate rule ``guarded_*``;
- the official ``gen_data2`` adds a parent's value to its child in the order of networkx's edge
  list, not topologically, so a child can receive a parent's noise only (another linear SCM);
  we sample the unit-weight SCM in topological order;
- the official code keeps a trial only if FGES with the true edges required returns exactly
  them on the training domain's rows (it redraws the others before training); we keep every
  trial, record whether GES recovers its graph (``recovers``), and judge the headline both
  ways: on every linear trial (``causal_beats_validation``) and on the recovered ones only
  (``causal_beats_validation_recovered``), corrected together;
- minibatches are drawn with replacement (Keras reshuffles each epoch); the best weights are
  kept on an improvement of min_delta (Keras's checkpoint keeps any improvement);
- the impostor is redrawn until it differs from the true graph; the target is a random
  qualifying sink (the official code takes the lowest-numbered: the same distribution).

With ``checkpoint`` (on in ``claim`` and ``paper``) each finished trial, synthetic or
diabetes, is kept under ``$LAB_CHECKPOINT_DIR`` (``kept``, ``lab.train.checkpoint.Kept``), its
arrays with their dtypes, so a run stopped at a deadline and resumed reads the trials it
finished back (with the seconds they took then) and makes only the rest: the same numbers. An
unfinished trial's training keeps its state as it goes (``train.train``'s ``progress``: pieces
of ``stop_every`` steps, the state saved at most once a minute), so a ``paper`` trial (7-11
minutes here) continues across windows shorter than itself, to the same numbers.
"""

import dataclasses
import functools
import importlib
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from scipy import stats

from lab.causal import SCM, Graph, Knowledge, ges, random_dag
from lab.causal.scm import find_cycle
from lab.causal.select import ancestor_lambda, causal_scores, combined, minmax, top_k
from lab.runs.claims import (
    GREATER,
    LESS,
    PAIRED,
    Declaration,
    declarations,
    judge,
    plural,
    said,
)
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.train import causal_selection as train
from lab.train import checkpoint as checkpoints

SHIFTS = ("all", "one")
MODES = ("fixed", "search")
MECHANISMS = ("linear", "nonlinear")
WEIGHTS = ("unit", "random")
DAGS = ("bernoulli", "official")
PAPER_EPOCH = 188  # minibatches of 32 in an epoch of the official code's 6,000 training rows
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # 5x the trials of every cell and of the real data: about 15 minutes here
    "claim": {"repeats": 30, "diabetes_repeats": 60, "checkpoint": True},
    # the official code's synthetic study (submission/Synthetic.ipynb), trial for trial; its
    # 100 repeats cost days on this CPU, so this runs the first few (the module docstring)
    "paper": {"nodes": [4], "mechanisms": ["linear"], "weights": "unit", "dag": "official",
              "shifts": ["all", "one"], "repeats": 3, "candidates": 100,
              "hidden": [512, 256], "network": "keras", "optimizer": "sgd", "lr": 1e-4,
              "batch": 32, "steps": 20 * PAPER_EPOCH, "stop_every": PAPER_EPOCH,
              "patience": 2, "train_rows": 6000, "stopping_rows": 2000,
              "selection_rows": 2000, "test_rows": 2000, "shift_mean": 1.0,
              "shift_scale": 2.0, "top_fraction": 0.1, "lam": "ancestors",
              "modes": ["fixed", "search"], "standardise": False, "guarded": True,
              "diabetes_repeats": 0, "checkpoint": True},
}
PARAMETERS = ("preset", "nodes", "mechanisms", "weights", "dag", "shifts", "repeats",
              "candidates", "hidden", "network", "steps", "batch", "lr", "optimizer",
              "stop_every", "patience", "train_rows", "stopping_rows", "selection_rows",
              "test_rows", "standardise", "edge_probability", "shift_mean", "shift_scale",
              "top_fraction", "lam", "modes", "guarded", "diabetes_repeats",
              "diabetes_hold_out", "seed", "checkpoint")


@dataclasses.dataclass(frozen=True)
class Setup:
    """The notebook's parameters, validated."""

    nodes: tuple[int, ...]  # graph sizes of the synthetic cells
    mechanisms: tuple[str, ...]  # of MECHANISMS
    weights: str  # unit: every edge weight and noise standard deviation 1 (the paper's); random
    dag: str  # bernoulli (edge_probability per forward pair) or official (the official code's)
    shifts: tuple[str, ...]  # of SHIFTS
    repeats: int  # trials per (nodes, mechanism); each is scored under every shift
    candidates: int  # MLPs per trial, differing only in their seed
    hidden: tuple[int, ...]  # units of each hidden layer
    network: str  # tanh (Equinox's initialisation) or keras (ReLU, Glorot, the official code's)
    steps: int  # optimiser steps per candidate, at most
    batch: int
    lr: float
    optimizer: str  # adam, or sgd with momentum 0.9 (the official code's)
    stop_every: int  # steps between early-stopping measurements; 0: no early stopping
    patience: int  # measurements without improvement before a candidate stops
    train_rows: int
    stopping_rows: int  # the early-stopping split (unused without early stopping)
    selection_rows: int  # the validation error and the causal score are measured here
    test_rows: int  # per shifted test domain
    standardise: bool  # synthetic data scaled by the training rows' statistics (official: no)
    edge_probability: float  # of each forward pair in a random DAG
    shift_mean: float  # the shifted noise's mean (the training noise has mean 0)
    shift_scale: float  # and its standard deviation's factor
    top_fraction: float  # of the candidates each rule selects
    lam: float | str  # lambda: a number >= 0, or "ancestors" (ancestor_lambda)
    modes: tuple[str, ...]  # of MODES
    guarded: bool  # also the true graph's score with our floor under the stand-in (guarded_*)
    diabetes_repeats: int  # 0: no real-data trials
    diabetes_hold_out: float  # fraction of rows held out as the shifted domain
    seed: int
    checkpoint: bool = False  # keep each finished trial; a rerun (a resume) reads it back

    @property
    def schedule(self) -> train.Schedule:
        return train.Schedule(self.steps, self.batch, self.lr, self.optimizer, self.stop_every,
                              self.patience)

    @property
    def k(self) -> int:
        """Candidates each rule selects."""
        return max(1, round(self.top_fraction * self.candidates))


def configure(**params: Any) -> Setup:
    """The notebook's parameters as a ``Setup``; a one-line ValueError naming a bad value,
    before anything is computed."""
    p = with_preset(params, PRESETS)
    for name, choices in (("weights", WEIGHTS), ("dag", DAGS), ("network", train.NETWORKS)):
        if p[name] not in choices:
            raise ValueError(f"unknown {name} {p[name]!r}; use one of {', '.join(choices)}")
    hidden = [p["hidden"]] * 2 if isinstance(p["hidden"], int) else list(p["hidden"])
    if not hidden or any(not isinstance(h, int) or h < 1 for h in hidden):
        raise ValueError(f"hidden {p['hidden']!r} must be a non-empty list of layer widths, "
                         "each at least 1")
    for name, choices in (("mechanisms", MECHANISMS), ("shifts", SHIFTS), ("modes", MODES)):
        values = tuple(p[name])
        if not values or any(v not in choices for v in values):
            raise ValueError(f"{name} {list(values)} must be a non-empty list of "
                             f"{', '.join(choices)}")
    nodes = tuple(int(n) for n in p["nodes"])
    if not nodes or min(nodes) < 2 or max(nodes) > 12:
        raise ValueError(f"nodes {list(nodes)} must be graph sizes from 2 to 12 (the search is "
                         "exhaustive per step)")
    for name in ("repeats", "candidates", "steps", "batch", "train_rows",
                 "stopping_rows", "selection_rows", "test_rows", "patience"):
        if p[name] < 1:
            raise ValueError(f"{name} must be at least 1, got {p[name]}")
    if p["repeats"] < 2 or p["candidates"] < 2:
        raise ValueError("repeats and candidates must be at least 2: a selection rule needs "
                         "candidates to choose from, a paired test trials to pair")
    if p["diabetes_repeats"] < 0:
        raise ValueError(f"diabetes_repeats must be at least 0, got {p['diabetes_repeats']}")
    if not 0 < p["edge_probability"] <= 1:
        raise ValueError(f"edge_probability must be in (0, 1], got {p['edge_probability']}")
    if not 0 < p["top_fraction"] <= 1:
        raise ValueError(f"top_fraction must be in (0, 1], got {p['top_fraction']}")
    if not 0 < p["diabetes_hold_out"] < 0.5:
        raise ValueError(f"diabetes_hold_out must be in (0, 0.5), got {p['diabetes_hold_out']}")
    if p["shift_scale"] <= 0:
        raise ValueError(f"shift_scale must be positive, got {p['shift_scale']}")
    if p["lr"] <= 0:
        raise ValueError(f"lr must be positive, got {p['lr']}")
    if p["optimizer"] not in train.OPTIMIZERS:
        raise ValueError(f"unknown optimizer {p['optimizer']!r}; use one of "
                         f"{', '.join(train.OPTIMIZERS)}")
    if not 0 <= p["stop_every"] <= p["steps"]:
        raise ValueError(f"stop_every must be between 0 (no early stopping) and steps "
                         f"{p['steps']}, got {p['stop_every']}")
    lam = p["lam"]
    if lam != "ancestors":
        try:
            lam = float(lam)
        except (TypeError, ValueError):
            raise ValueError(f"lam must be a number >= 0 or 'ancestors', got {lam!r}") from None
        if lam < 0:
            raise ValueError(f"lambda must be at least 0, got {lam}; use 0 for the validation "
                             "error alone, 1, or 'ancestors'")
    return Setup(nodes=nodes, mechanisms=tuple(p["mechanisms"]), weights=str(p["weights"]),
                 dag=str(p["dag"]), shifts=tuple(p["shifts"]),
                 repeats=int(p["repeats"]), candidates=int(p["candidates"]),
                 hidden=tuple(hidden), network=str(p["network"]), steps=int(p["steps"]),
                 batch=int(p["batch"]),
                 lr=float(p["lr"]), optimizer=str(p["optimizer"]),
                 stop_every=int(p["stop_every"]), patience=int(p["patience"]),
                 train_rows=int(p["train_rows"]), stopping_rows=int(p["stopping_rows"]),
                 selection_rows=int(p["selection_rows"]), test_rows=int(p["test_rows"]),
                 standardise=bool(p["standardise"]),
                 edge_probability=float(p["edge_probability"]),
                 shift_mean=float(p["shift_mean"]), shift_scale=float(p["shift_scale"]),
                 top_fraction=float(p["top_fraction"]), lam=lam, modes=tuple(p["modes"]),
                 guarded=bool(p["guarded"]),
                 diabetes_repeats=int(p["diabetes_repeats"]),
                 diabetes_hold_out=float(p["diabetes_hold_out"]), seed=int(p["seed"]),
                 checkpoint=bool(p.get("checkpoint", False)))


# the rules ------------------------------------------------------------------------------------

def rule_names(setup: Setup) -> list[str]:
    """``validation``, ``causal_<mode>`` (the paper's score with the true graph: no floor under
    the stand-in target, as Tetrad's), ``impostor_<mode>`` (the same with the impostor),
    ``guarded_<mode>`` (the true graph with our floor under the stand-in,
    ``lab.causal.score.StandIn``, if ``guarded``), ``flipped_search`` (the true graph's search
    score with the official code's sign, if searched), ``oracle``."""
    graphs = ("causal", "impostor", "guarded") if setup.guarded else ("causal", "impostor")
    names = ["validation"]
    names += [f"{g}_{mode}" for mode in setup.modes for g in graphs]
    if "search" in setup.modes:
        names.append("flipped_search")
    return names + ["oracle"]


def lambda_for(setup: Setup, graph: Graph, target: str) -> float:
    return ancestor_lambda(graph, target) if setup.lam == "ancestors" else float(setup.lam)


# one trial ------------------------------------------------------------------------------------

def standardise(train_rows: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Every array with the training rows' column means and standard deviations."""
    mean, std = train_rows.mean(0), train_rows.std(0) + 1e-12
    return [(a - mean) / std for a in (train_rows, *others)]


def fit_candidates(setup: Setup, seed: int, x: np.ndarray, y: np.ndarray,
                   x_stop: np.ndarray, y_stop: np.ndarray, progress: Path | None = None):
    """``candidates`` MLPs on ``(x, y)``, differing only in their seed, early-stopped on
    ``(x_stop, y_stop)`` if ``stop_every``: ``(models, log)``. With ``progress`` (a file)
    the training keeps its state there as it goes and continues from it (``train.train``)."""
    key_models, key_batches = jax.random.split(jax.random.key(seed))
    models = train.candidates(key_models, setup.candidates, x.shape[1], setup.hidden,
                              setup.network)
    keys = jax.random.split(key_batches, setup.candidates)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return train.train(models, keys, f32(x), f32(y), f32(x_stop), f32(y_stop), setup.schedule,
                       progress=progress)


def evaluate(setup: Setup, seed: int, names: tuple[str, ...], target: str,
             train_data: np.ndarray, stopping: np.ndarray, selection: np.ndarray,
             tests: dict[str, np.ndarray],
             graph: Graph, impostor: Graph, knowledge: Knowledge | None = None,
             progress: Path | None = None) -> dict[str, Any]:
    """Steps 2-5 of the module docstring on standardised data (columns in ``names`` order);
    ``progress``: as ``fit_candidates``'s (the training seconds then count those spent
    before a resume)."""
    j = names.index(target)
    inputs = [i for i in range(len(names)) if i != j]
    started = time.perf_counter()
    models, log = fit_candidates(setup, seed, train_data[:, inputs], train_data[:, j],
                                 stopping[:, inputs], stopping[:, j], progress)
    predict = lambda data: np.asarray(train.predict(models, np.asarray(data[:, inputs],  # noqa: E731
                                                                         np.float32)), float)
    on_selection = predict(selection)
    validation = np.mean((on_selection - selection[:, j]) ** 2, axis=1)
    spread = on_selection.std(axis=1)
    ood = {shift: np.mean((predict(data) - data[:, j]) ** 2, axis=1)
           for shift, data in tests.items()}
    trained = time.perf_counter() - started + log.get("seconds_before", 0.0)

    causal, floored, seconds = {}, {}, {}
    graphs = [("causal", graph), ("impostor", impostor)]
    graphs += [("guarded", graph)] if setup.guarded else []
    for mode in setup.modes:
        for name, g in graphs:
            started = time.perf_counter()
            # the impostor is a different belief: its edges, without the true tiers
            causal[f"{name}_{mode}"], floored[f"{name}_{mode}"] = causal_scores(
                selection, g, target, on_selection, mode,
                None if name == "impostor" else knowledge,
                observed_floor=name == "guarded")
            seconds[f"{name}_{mode}"] = time.perf_counter() - started
    lam = {"causal": lambda_for(setup, graph, target),
           "impostor": lambda_for(setup, impostor, target)}
    lam["guarded"] = lam["causal"]
    scores = {"validation": validation}
    for key, value in causal.items():
        scores[key] = combined(validation, value, lam[key.split("_")[0]])
    if "search" in setup.modes:
        scores["flipped_search"] = combined(validation, -causal["causal_search"], lam["causal"])

    results = {}
    by_validation = spread[top_k(validation, setup.k)].mean()
    for shift, errors in ood.items():
        normalised = minmax(errors)
        rules = dict(scores, oracle=errors)
        results[shift] = {}
        for rule, score in rules.items():
            chosen = top_k(score, setup.k)
            results[shift][rule] = {"ood": float(errors[chosen].mean()),
                                    "normalised": float(normalised[chosen].mean()),
                                    "chosen": chosen.tolist(),
                                    "spearman": rank_correlation(score, errors),
                                    "spread": float(spread[chosen].mean() / by_validation)}
    # shrinkage: does a score prefer the candidates whose predictions spread least?
    with_spread = {rule: rank_correlation(score, spread) for rule, score in scores.items()}
    with_spread |= {f"score_{key}": rank_correlation(value, spread)
                    for key, value in causal.items()}
    return {"names": list(names), "target": target, "edges": graph.edges.tolist(),
            "impostor_edges": impostor.edges.tolist(), "lambda": lam,
            "validation": validation, "ood": ood, "causal": causal, "spread": spread,
            "truth_spread": float(selection[:, j].std()), "with_spread": with_spread,
            "floored": {k: int(v.sum()) for k, v in floored.items()},
            "final_loss": np.asarray(log["loss"][:, -20:].mean(1)),
            "stopped_at": np.asarray(log["stopped_at"]), "results": results,
            "seconds": {"train": trained, **seconds}}


def official_dag(rng: np.random.Generator, nodes: int, attempts: int) -> Graph:
    """The official code's ``random_dag(nodes, edges)``: ``attempts`` times, a random ordered
    pair of distinct nodes becomes an edge unless it closes a cycle (a rejected pair does not
    count; a pair already there does, so the graph has at most ``attempts`` edges)."""
    edges = np.zeros((nodes, nodes), bool)
    while attempts > 0:
        a, b = rng.choice(nodes, 2, replace=False)
        added = edges.copy()
        added[a, b] = True
        if find_cycle(added) is None:
            edges, attempts = added, attempts - 1
    return Graph(tuple(f"x{i}" for i in range(nodes)), edges)


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's correlation; 0 when either side is constant."""
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(stats.spearmanr(a, b).statistic)


def _sink_target(rng: np.random.Generator, graph: Graph) -> int | None:
    sinks = [j for j in range(len(graph.names))
             if len(graph.children(j)) == 0 and len(graph.parents(j)) > 0]
    return int(rng.choice(sinks)) if sinks else None


def trial(setup: Setup, nodes: int, mechanism: str, repeat: int,
          progress: Path | None = None) -> dict[str, Any]:
    """One synthetic trial (the module docstring); reproducible from its arguments;
    ``progress``: as ``fit_candidates``'s."""
    seed = int(np.random.SeedSequence([setup.seed, nodes, MECHANISMS.index(mechanism),
                                       repeat]).generate_state(1)[0])
    rng = np.random.default_rng(seed)
    if setup.dag == "official":
        draw = lambda: official_dag(rng, nodes, int(rng.integers(nodes, nodes ** 2 + 1)))  # noqa: E731
        draw_impostor = lambda: official_dag(rng, nodes, int(rng.integers(0, nodes ** 2 + 1)))  # noqa: E731
    else:
        draw = draw_impostor = lambda: random_dag(rng, nodes, setup.edge_probability)  # noqa: E731
    graph = draw()
    while (target := _sink_target(rng, graph)) is None:
        graph = draw()
    impostor = draw_impostor()
    while np.array_equal(impostor.edges, graph.edges):
        impostor = draw_impostor()
    if setup.weights == "unit":
        scm = SCM(graph, np.where(graph.edges.T, 1.0, 0.0), np.ones(nodes), mechanism)
    else:
        scm = SCM.random(rng, graph, mechanism)
    n, m = setup.train_rows, setup.stopping_rows
    rows = scm.sample(rng, n + m + setup.selection_rows)
    inputs = [i for i in range(nodes) if i != target]
    shifted = int(rng.choice(inputs))
    everything = dict.fromkeys(range(nodes))
    tests = {}
    for shift in setup.shifts:
        which = everything if shift == "all" else {shifted: None}
        tests[shift] = scm.sample(rng, setup.test_rows,
                                  shift=dict.fromkeys(which, setup.shift_mean),
                                  scale=dict.fromkeys(which, setup.shift_scale))
    recovered = recovers(rows, graph)
    parts = (rows[:n], rows[n:n + m], rows[n + m:], *tests.values())
    train_data, stopping, selection, *test_data = (standardise(*parts) if setup.standardise
                                                   else parts)
    out = evaluate(setup, seed, graph.names, graph.names[target], train_data, stopping,
                   selection, dict(zip(tests, test_data, strict=True)), graph, impostor,
                   progress=progress)
    return out | {"nodes": nodes, "mechanism": mechanism, "repeat": repeat,
                  "shifted_input": graph.names[shifted], "seed": seed, "recovered": recovered}


def recovers(rows: np.ndarray, graph: Graph) -> bool:
    """The official code's trial filter: whether the search with ``graph``'s edges required
    (there Tetrad's FGES, here ``lab.causal.ges``) on the training domain's ``rows`` returns
    exactly those edges, adding none. The official Synthetic.ipynb redraws a trial that fails
    it before training anything; we keep every trial and judge the headline both ways."""
    found = ges(rows, graph.names, Knowledge(required=tuple(graph.edge_list())))
    return bool(np.array_equal(found.graph.edges, graph.edges))


# the real data --------------------------------------------------------------------------------

DIABETES_TIERS = (("age", "sex"), ("bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"),
                  ("progression",))


@functools.cache
def diabetes() -> tuple[tuple[str, ...], np.ndarray]:
    """scikit-learn's diabetes table (442 patients; bundled, offline) as ``(names, rows)``,
    the target last as ``progression``, unscaled."""
    from sklearn.datasets import load_diabetes

    table = load_diabetes(scaled=False)
    names = (*table.feature_names, "progression")
    return names, np.column_stack([table.data, table.target]).astype(float)


@functools.cache
def diabetes_graph() -> Graph:
    """The "known" graph: GES's (``lab.causal.ges``, the search the scores use) on every row,
    standardised, under ``DIABETES_TIERS``; its admissible DAG."""
    names, rows = diabetes()
    (data,) = standardise(rows)
    return ges(data, names, Knowledge(tiers=DIABETES_TIERS)).graph


def diabetes_trial(setup: Setup, repeat: int, progress: Path | None = None) -> dict[str, Any]:
    """One real-data trial: a random input and side; its most extreme ``diabetes_hold_out``
    rows are the shifted domain, the rest split 3:1:1 into training, stopping and selection
    rows (3:1 into training and selection without early stopping)."""
    names, rows = diabetes()
    graph = diabetes_graph()
    seed = int(np.random.SeedSequence([setup.seed, 99, repeat]).generate_state(1)[0])
    rng = np.random.default_rng(seed)
    variable = int(rng.integers(len(names) - 1))
    side = str(rng.choice(["smallest", "largest"]))
    order = np.argsort(rows[:, variable], kind="stable")
    held = int(round(setup.diabetes_hold_out * len(rows)))
    out_rows = order[:held] if side == "smallest" else order[-held:]
    in_rows = rng.permutation(np.setdiff1d(np.arange(len(rows)), out_rows))
    parts = (3, 1, 1) if setup.stop_every else (3, 0, 1)
    a, b = (np.cumsum(parts)[:2] * len(in_rows)) // sum(parts)
    train_data, stopping, selection, shifted = standardise(
        rows[in_rows[:a]], rows[in_rows[a:b]] if b > a else rows[in_rows[:1]],
        rows[in_rows[b:]], rows[out_rows])
    density = graph.edges.sum() / (len(names) * (len(names) - 1) / 2)
    impostor = random_dag(rng, len(names), float(density), names)
    out = evaluate(setup, seed, names, "progression", train_data, stopping, selection,
                   {"held_out": shifted}, graph, impostor, Knowledge(tiers=DIABETES_TIERS),
                   progress=progress)
    return out | {"repeat": repeat, "shifted_input": names[variable], "side": side,
                  "seed": seed}


# the study ------------------------------------------------------------------------------------

def cells(setup: Setup) -> list[tuple[int, str]]:
    return [(n, m) for n in setup.nodes for m in setup.mechanisms]


def study(setup: Setup, on_trial=None, kept: checkpoints.Kept | None = None
          ) -> dict[str, list[dict[str, Any]]]:
    """Every synthetic trial (by ``"<nodes>_<mechanism>"``) and the diabetes trials
    (``"diabetes"``); ``on_trial(name, trial)`` after each. A trial ``kept`` earlier
    (``kept(setup)``) is read back, with the seconds it took then."""
    kept = kept or checkpoints.Kept(None)
    out: dict[str, list[dict[str, Any]]] = {}
    for nodes, mechanism in cells(setup):
        name = f"{nodes}_{mechanism}"
        for repeat in range(setup.repeats):
            out.setdefault(name, []).append(_kept_trial(
                kept, ["synthetic", _unit(setup, SYNTHETIC_ONLY), nodes, mechanism, repeat],
                lambda progress, nodes=nodes, mechanism=mechanism, repeat=repeat: trial(
                    setup, nodes, mechanism, repeat, progress)))
            if on_trial:
                on_trial(name, out[name][-1])
    for repeat in range(setup.diabetes_repeats):
        out.setdefault("diabetes", []).append(_kept_trial(
            kept, ["diabetes", _unit(setup, DIABETES_ONLY), repeat],
            lambda progress, repeat=repeat: diabetes_trial(setup, repeat, progress)))
        if on_trial:
            on_trial("diabetes", out["diabetes"][-1])
    return out


# what a run's list of cells and counts of trials hold, and what only one kind of trial uses:
# left out of a trial's key, so that a run with more trials or cells reads back the same ones
STUDY_ONLY = ("nodes", "mechanisms", "repeats", "diabetes_repeats", "checkpoint")
SYNTHETIC_ONLY = ("weights", "dag", "shifts", "train_rows", "stopping_rows", "selection_rows",
                  "test_rows", "standardise", "edge_probability", "shift_mean", "shift_scale")
DIABETES_ONLY = ("diabetes_hold_out",)


def _unit(setup: Setup, other: tuple[str, ...]) -> dict[str, Any]:
    """The fields of ``setup`` that define one trial of a kind (``other``: the other kind's)."""
    return {k: v for k, v in dataclasses.asdict(setup).items()
            if k not in STUDY_ONLY and k not in other}


def _kept_trial(kept: checkpoints.Kept, key: list[Any], make) -> dict[str, Any]:
    """``make(progress)``'s trial, or the one ``kept`` under ``key``; without a folder,
    ``make(None)``'s value as it is. With a folder, an unfinished trial's training keeps its
    state in ``progress`` (``state-<digest>.eqx`` beside the kept trials) as it goes and a
    rerun continues it; the file goes once the trial is kept."""
    if kept.folder is None:
        return kept(key, lambda: make(None))
    progress = kept.path(key, "state-").with_suffix(".eqx")
    if progress.exists() and not kept.path(key, "trial-").exists():
        print(f"trial {key[2:]}: its training continues from step "
              f"{checkpoints.read_info(progress)['done']} (its kept state)")
    trial = checkpoints.from_json(kept(key, lambda: checkpoints.to_json(make(progress)),
                                       prefix="trial-"))
    progress.unlink(missing_ok=True)
    return trial


# the code that makes a kept trial (the functions as defined here, not as a test replaces them)
TRIAL_CODE = (train, importlib.import_module("lab.models.feedforward"),
              *(importlib.import_module(f"lab.causal.{m}")
                for m in ("ges", "pdag", "scm", "score", "select")),
              Setup, standardise, fit_candidates, evaluate, official_dag, rank_correlation,
              _sink_target, trial, recovers, diabetes, diabetes_graph, diabetes_trial,
              lambda_for)


def kept(setup: Setup) -> checkpoints.Kept:
    """Where ``study`` keeps each finished trial (``setup.checkpoint``; otherwise a ``Kept``
    that keeps nothing), in a folder named by what else defines the trials: jax's version,
    the devices' kind, the diabetes table's bytes, the source of the code that makes a trial
    and the constants it reads (an edit there makes them again)."""
    if not setup.checkpoint:
        return checkpoints.Kept(None)
    names, rows = diabetes()
    return checkpoints.Kept(checkpoints.folder(
        "causal_selection", names, checkpoints.digest(rows), MECHANISMS, DIABETES_TIERS,
        checkpoints.sources(*TRIAL_CODE)))


def paired(trials: list[dict[str, Any]], shift: str, rule: str,
           baseline: str = "validation") -> dict[str, Any]:
    """``rule`` against ``baseline`` over trials, on the min-max-normalised OOD error of their
    selections (per trial: 0 is the best candidate, 1 the worst): the means, wins / ties /
    losses of ``rule``, and the one-sided Wilcoxon signed-rank p-value for ``rule`` lower."""
    a = np.array([t["results"][shift][rule]["normalised"] for t in trials])
    b = np.array([t["results"][shift][baseline]["normalised"] for t in trials])
    diff = a - b
    nonzero = diff[np.abs(diff) > 1e-12]
    p = (float(stats.wilcoxon(nonzero, alternative="less").pvalue) if len(nonzero) else 1.0)
    raw = np.array([t["results"][shift][rule]["ood"] for t in trials])
    raw_base = np.array([t["results"][shift][baseline]["ood"] for t in trials])
    return {"rule": float(a.mean()), "baseline": float(b.mean()),
            "rule_ood": float(raw.mean()), "baseline_ood": float(raw_base.mean()),
            "wins": int((diff < -1e-12).sum()), "ties": int((np.abs(diff) <= 1e-12).sum()),
            "losses": int((diff > 1e-12).sum()), "p": p, "trials": len(trials)}


def table(setup: Setup, trials: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (cell, shift): every rule's mean normalised and raw OOD error, its mean
    Spearman correlation with the OOD error, and its paired comparison with validation."""
    rows = []
    for cell, ts in trials.items():
        for shift in ts[0]["results"]:
            row = {"cell": cell, "shift": shift, "trials": len(ts), "rules": {}}
            for rule in ts[0]["results"][shift]:
                per_trial = [t["results"][shift][rule]["normalised"] for t in ts]
                r = {"normalised": float(np.mean(per_trial)),
                     "normalised_range": [float(np.min(per_trial)), float(np.max(per_trial))],
                     "ood": float(np.mean([t["results"][shift][rule]["ood"] for t in ts])),
                     "spearman": float(np.mean([t["results"][shift][rule]["spearman"]
                                                for t in ts]))}
                if rule != "validation":
                    r["vs_validation"] = paired(ts, shift, rule)
                row["rules"][rule] = r
            rows.append(row)
    return rows


# the claims -----------------------------------------------------------------------------------

ALPHA = 0.05  # the level of the descriptive Wilcoxon tests (spread, cells); no claim uses it
HEADLINE_MODE = "search"  # the official code's score; "fixed" is reported beside it
ABSTRACT = ("We show on both publicly available and synthetic datasets that our method is able "
            "to identify more robust models in terms of generalizability to unseen "
            "out-of-distribution test examples and domains where covariates have shifted.")
GRAPH = ("We show in this paper how prior knowledge in the form of a causal graph can be "
         "utilized to guide model selection, i.e., to identify from a set of trained networks "
         "the models that are the most robust and invariant to unseen domains.")
TRIAL = ("trial: one random DAG and SCM, its data and its candidates (each trial draws all of "
         "them from its own seed, so trials are independent draws of the cell's task, not "
         "seeds of one task); its shifted domains averaged, as they share the trial's graph, "
         "data and candidates")
LOG_MSE = ("log of the mean out-of-domain MSE of the rule's top k (natural log), averaged over "
           "the trial's shifted domains")
GAIN = 0.01  # 1% of the out-of-domain MSE, in natural log units
GAIN_SOURCE = ("stated: 1% of the out-of-domain MSE (0.01 in natural log); the stored text of "
               "the paper is its abstract, which gives no effect size, and its Fig. 3 (the "
               "official Graphs.ipynb) plots per-repeat perturbed MSE without one; a choice "
               "that saves under 1% of the shifted error is not 'more robust' in practice")
AFTER = ("the six recorded runs of 2026-11-26 (default, weights random, paper x2, claim), "
         "whose pooled errors were known; declared with the shared verdict rule")


def _beats(name: str, statement: str, unit: str, source: str = "Abstract") -> Declaration:
    return Declaration(
        name=name, statement=statement, quote=ABSTRACT,
        source=f"Kyono & van der Schaar 2019, {source}", unit=unit,
        measure=f"{LOG_MSE}: the causal score's choice minus validation error's",
        comparison=PAIRED, direction=LESS, minimum_effect=GAIN,
        minimum_effect_source=GAIN_SOURCE, family="beats_validation", declared_after=AFTER)


CLAIMS = declarations(
    _beats("causal_beats_validation",
           "In the paper's setting (linear mechanisms), the paper's causal score (true graph, "
           "searched, no floor under the predictions, as Tetrad's BIC) chooses candidates with "
           "lower out-of-domain error than validation error does",
           f"{TRIAL}; linear cells only",
           "Abstract; Figs. 3a-b (made by the official Synthetic.ipynb, its README says)"),
    _beats("causal_beats_validation_recovered",
           "The same on the official code's trials: in the linear cells, on the trials whose "
           "graph the search (the true edges required) recovers exactly on the training "
           "domain's rows, the paper's causal score (searched, no floor) chooses candidates "
           "with lower out-of-domain error than validation error does",
           f"{TRIAL}; linear cells, only the trials whose graph GES recovers (the official "
           "Synthetic.ipynb redraws the others before training)",
           "Abstract; Figs. 3a-b (the official Synthetic.ipynb keeps a trial only if FGES "
           "with the true edges required returns exactly them)"),
    _beats("causal_beats_validation_nonlinear",
           "Extension beyond the paper (tanh mechanisms, where the linear-Gaussian score is "
           "misspecified): the same comparison on the nonlinear cells",
           f"{TRIAL}; nonlinear cells only"),
    _beats("guarded_beats_validation",
           "Our variant (extension): the causal score with a floor under the predictions that "
           "no shrunk or constant predictor can beat (searched) chooses candidates with lower "
           "out-of-domain error than validation error does, on the linear cells",
           f"{TRIAL}; linear cells only"),
    _beats("real_data",
           "On the diabetes table with a held-out extreme of one input, the causal score with "
           "the known graph (searched) chooses candidates with lower held-out error than "
           "validation error does",
           "held-out domain of the diabetes table (an input and a side: its most extreme 20% "
           "of rows); the trials that held out the same domain averaged (they share its test "
           "rows); the verdict is about this one table",
           "Abstract; Figs. 5-6 (four Kaggle tables; ours is the diabetes table)"),
    Declaration(
        name="impostor_does_not",
        statement="In the linear cells, an impostor graph's score (searched) does not choose "
                  "candidates with out-of-domain error lower than validation error's by as "
                  "much as the smallest gain that counts (non-inferiority of validation "
                  "against the impostor, margin 1%)",
        quote="(not found in the stored text of the paper) its only stored text is the "
              f"abstract: \"{GRAPH}\"",
        source="Kyono & van der Schaar 2019, Abstract; Fig. 4 of the official Graphs.ipynb "
               "plots ICAM-10 (an incorrect graph) against the Hamming distance",
        unit=f"{TRIAL}; linear cells only",
        measure=f"{LOG_MSE}: the impostor's choice minus validation error's",
        comparison=PAIRED, direction=GREATER, threshold=-GAIN, minimum_effect=0.0,
        minimum_effect_source="stated: the margin is the headline's smallest gain (1% of the "
                              "out-of-domain MSE); an impostor gaining less does not help",
        family="impostor", declared_after=AFTER),
    Declaration(
        name="causal_beats_impostor",
        statement="In the linear cells, the true graph's score (searched) chooses candidates "
                  "with lower out-of-domain error than an impostor graph's does: the gain "
                  "comes from knowing the graph",
        quote="(not found in the stored text of the paper) its only stored text is the "
              f"abstract: \"{GRAPH}\"",
        source="Kyono & van der Schaar 2019, Abstract; Fig. 4 of the official Graphs.ipynb "
               "(CAM-10 against ICAM-10)",
        unit=f"{TRIAL}; linear cells only",
        measure=f"{LOG_MSE}: the true graph's choice minus the impostor's",
        comparison=PAIRED, direction=LESS, minimum_effect=GAIN,
        minimum_effect_source=GAIN_SOURCE, family="impostor", declared_after=AFTER))

# claim -> (the cells it is judged on, the rule, the baseline); all on the searched score
JUDGED = {"causal_beats_validation": ("linear", "causal_search", "validation"),
          "causal_beats_validation_recovered": ("linear", "causal_search", "validation"),
          "causal_beats_validation_nonlinear": ("nonlinear", "causal_search", "validation"),
          "guarded_beats_validation": ("linear", "guarded_search", "validation"),
          "real_data": ("diabetes", "causal_search", "validation"),
          "impostor_does_not": ("linear", "impostor_search", "validation"),
          "causal_beats_impostor": ("linear", "causal_search", "impostor_search")}
# judged on the trials whose graph the search recovers only (the official code's filter)
RECOVERED_ONLY = frozenset({"causal_beats_validation_recovered"})


def _pooled(trials: dict[str, list[dict[str, Any]]], rule: str, synthetic: bool = True,
            baseline: str = "validation", mechanism: str | None = None) -> dict[str, Any]:
    """``paired`` over every synthetic (or the diabetes) trial and shift together (only the
    cells of ``mechanism``, if given): a description, not a verdict."""
    rows = []
    for cell, ts in trials.items():
        if (cell == "diabetes") == synthetic:
            continue
        if mechanism is not None and not cell.endswith(f"_{mechanism}"):
            continue
        for shift in ts[0]["results"]:
            rows += [{"results": {"pooled": t["results"][shift]}} for t in ts]
    return paired(rows, "pooled", rule, baseline) if rows else {}


def per_trial(trials: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per trial, the numbers the claims are judged from: its cell, repeat and
    ``domain`` (the independent unit: the trial itself on a synthetic cell; the held-out
    input and side on the diabetes table), and per rule, averaged over the trial's shifts,
    ``log_ood`` (the log of its top k's mean OOD MSE), ``ood`` and ``normalised``."""
    rows = []
    for cell, ts in trials.items():
        for i, t in enumerate(ts):
            repeat = t.get("repeat", i)
            domain = (f"{t['shifted_input']}/{t['side']}" if cell == "diabetes"
                      else f"{cell}/{repeat}")
            rows.append({"cell": cell, "repeat": repeat, "domain": domain,
                         "log_ood": _over_shifts(t, "ood", np.log), "ood": _over_shifts(t, "ood"),
                         "normalised": _over_shifts(t, "normalised"),
                         "recovered": t.get("recovered")})
    return rows


def _over_shifts(t: dict[str, Any], key: str, f=float) -> dict[str, float]:
    """Per rule, the mean over ``t``'s shifts of ``f`` of its top k's ``key``."""
    shifts = list(t["results"])
    return {rule: float(np.mean([f(t["results"][s][rule][key]) for s in shifts]))
            for rule in t["results"][shifts[0]]}


def _in(cell: str, cells: str) -> bool:
    return cell == "diabetes" if cells == "diabetes" else (
        cell != "diabetes" and cell.endswith(f"_{cells}"))


def units(rows: list[dict[str, Any]], cells: str, rule: str, baseline: str,
          key: str = "log_ood", recovered_only: bool = False
          ) -> tuple[list[float], list[float], int]:
    """``(rule's values, baseline's values, trials)`` per independent unit of the ``cells``
    (``linear``, ``nonlinear`` or ``diabetes``): the mean of ``key`` over each domain's
    trials (one trial a domain on the synthetic cells); ``recovered_only``: the trials whose
    graph the search recovers (``recovers``) only."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if recovered_only and r.get("recovered") is not True:
            continue
        if _in(r["cell"], cells) and rule in r[key]:
            groups.setdefault(r["domain"], []).append(r)
    a = [float(np.mean([r[key][rule] for r in g])) for g in groups.values()]
    b = [float(np.mean([r[key][baseline] for r in g])) for g in groups.values()]
    return a, b, sum(len(g) for g in groups.values())


def _tested(setup: Setup, cells: str, rule: str) -> bool:
    """Whether a run of ``setup`` measures a claim on ``cells`` with ``rule``."""
    ran = setup.diabetes_repeats > 0 if cells == "diabetes" else cells in setup.mechanisms
    return ran and (not rule.startswith("guarded") or setup.guarded)


def shrinkage(setup: Setup, trials: dict[str, list[dict[str, Any]]],
              mechanism: str | None = None) -> dict[str, Any]:
    """Prediction spread (the standard deviation of a candidate's predictions on the selection
    split) of each rule's choice, over the synthetic trials (of ``mechanism``, if given):

    - ``relative_spread``: per trial, the chosen candidates' mean spread over the validation
      choice's; the geometric mean over trials (and the smallest and largest ratio), the
      trials below and above 1, and the one-sided Wilcoxon p-value for below (the oracle's
      over trials and shifts, as it chooses per shift);
    - ``with_spread``: per trial, Spearman's correlation over the candidates between a score
      (a rule's, lower is better, or ``score_<graph>_<mode>``, the causal score alone) and the
      spread; the mean, median, and the trials where it is positive (a lower score for less
      spread);
    - ``validation_over_truth``: the validation choice's spread over the observed target's,
      the geometric mean over trials."""
    ts = [t for cell, group in trials.items() if cell != "diabetes"
          and (mechanism is None or cell.endswith(f"_{mechanism}")) for t in group]
    if not ts:
        return {}
    first = next(iter(ts[0]["results"]))
    out: dict[str, Any] = {"trials": len(ts), "relative_spread": {}, "with_spread": {}}
    for rule in ts[0]["results"][first]:
        shifts = list(ts[0]["results"]) if rule == "oracle" else [first]
        ratios = np.array([t["results"][s][rule]["spread"] for t in ts for s in shifts])
        logs = np.log(ratios)
        nonzero = logs[np.abs(logs) > 1e-12]
        out["relative_spread"][rule] = {
            "geometric_mean": float(np.exp(logs.mean())),
            "min": float(ratios.min()), "max": float(ratios.max()),
            "below": int((logs < -1e-12).sum()), "above": int((logs > 1e-12).sum()),
            "p_below": float(stats.wilcoxon(nonzero, alternative="less").pvalue)
            if len(nonzero) else 1.0}
    for key in ts[0]["with_spread"]:
        rho = np.array([t["with_spread"][key] for t in ts])
        out["with_spread"][key] = {"mean": float(rho.mean()), "median": float(np.median(rho)),
                                   "positive": int((rho > 0).sum())}
    validation = [t["spread"][t["results"][first]["validation"]["chosen"]].mean()
                  / t["truth_spread"] for t in ts]
    out["validation_over_truth"] = float(np.exp(np.mean(np.log(validation))))
    return out


def driven_by_spread(s: dict[str, Any], mode: str, graph: str = "causal") -> bool | None:
    """The criterion declared in the notebook before the run: the causal score's choice is
    driven by prediction spread if its chosen candidates spread less than the validation
    choice's (one-sided Wilcoxon over trials, p < ALPHA) and the causal score alone ranks the
    candidates like their spread (median per-trial Spearman at least 0.5)."""
    if not s:
        return None
    if f"{graph}_{mode}" not in s["relative_spread"]:
        return None
    return bool(s["relative_spread"][f"{graph}_{mode}"]["p_below"] < ALPHA
                and s["with_spread"][f"score_{graph}_{mode}"]["median"] >= 0.5)


def verdict(setup: Setup, trials: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every metric of the run: the per-trial numbers the claims are judged from
    (``per_trial``), the table per cell and shift, the pooled descriptions, the prediction
    spread and the times. :func:`summary` judges the claims."""
    mode = HEADLINE_MODE if HEADLINE_MODE in setup.modes else setup.modes[0]
    rows = table(setup, trials)
    m: dict[str, Any] = {"k": setup.k, "candidates": setup.candidates, "mode": mode,
                         "table": rows, "per_trial": per_trial(trials)}
    for rule in rule_names(setup)[1:]:
        m[f"pooled_{rule}"] = _pooled(trials, rule)
        if "diabetes" in trials:
            m[f"diabetes_{rule}"] = _pooled(trials, rule, synthetic=False)
    m["pooled_causal_vs_impostor"] = _pooled(trials, f"causal_{mode}",
                                             baseline=f"impostor_{mode}")
    m["by_mechanism"] = {mech: {rule: _pooled(trials, rule, mechanism=mech)
                                for rule in rule_names(setup)[1:-1]}
                         for mech in setup.mechanisms}
    synthetic = [r for r in rows if r["cell"] != "diabetes"]
    m["cells"] = len(synthetic)
    # a description per cell and shift (a Wilcoxon test of its trial x shift pairs), no verdict
    m["cells_causal_beats_validation"] = [
        f"{r['cell']}/{r['shift']}" for r in synthetic
        if r["rules"][f"causal_{mode}"]["vs_validation"]["p"] < ALPHA]
    for cells in (*setup.mechanisms, *(("diabetes",) if "diabetes" in trials else ())):
        for rule in ("validation", f"causal_{mode}"):  # the headline scalars
            a, _, _ = units(m["per_trial"], cells, rule, rule, "ood")
            m[f"{cells}_{rule}_ood"] = float(np.mean(a))
    if "diabetes" in trials:
        m["diabetes_graph"] = diabetes_graph().edge_list()
    m["shrinkage"] = {"all": shrinkage(setup, trials)}
    m["shrinkage"] |= {mech: shrinkage(setup, trials, mech) for mech in setup.mechanisms}
    m["shrinkage_driven"] = {key: driven_by_spread(value, mode)
                             for key, value in m["shrinkage"].items()}
    if setup.guarded:  # the same criterion for our floored score
        m["shrinkage_driven_guarded"] = {key: driven_by_spread(value, mode, "guarded")
                                           for key, value in m["shrinkage"].items()}
    m["floored"] = {cell: int(sum(sum(t["floored"].values()) for t in ts))
                    for cell, ts in trials.items()}
    m["seconds_per_trial"] = {cell: float(np.mean([sum(t["seconds"].values()) for t in ts]))
                              for cell, ts in trials.items()}
    return m


def _numbers(rows: list[dict[str, Any]], cells: str, rule: str, baseline: str,
             recovered_only: bool = False) -> dict[str, Any]:
    a, b, n = units(rows, cells, rule, baseline, recovered_only=recovered_only)
    if not n:
        return {"trials": 0}
    d = np.array(a) - np.array(b)
    ood, ood_base, _ = units(rows, cells, rule, baseline, "ood", recovered_only)
    norm, norm_base, _ = units(rows, cells, rule, baseline, "normalised", recovered_only)
    out = {"trials": n}
    if recovered_only:
        _, _, every = units(rows, cells, rule, baseline)
        out["trials whose graph GES recovers"] = f"{n} of {every}"
    return out | {
        f"OOD MSE of the top k, mean over units: {rule} / {baseline}":
            f"{np.mean(ood):.4g} / {np.mean(ood_base):.4g}",
        f"normalised OOD error (0 best, 1 worst candidate): {rule} / {baseline}":
            f"{np.mean(norm):.3f} / {np.mean(norm_base):.3f}",
        "units lower / tied / higher":
            f"{int((d < -1e-12).sum())} / {int((abs(d) <= 1e-12).sum())} / "
            f"{int((d > 1e-12).sum())}"}


def summary(m: dict[str, Any], setup: Setup, to_remake: str = "") -> dict[str, Any]:
    """The claims (``CLAIMS``, each judged by the shared rule from the per-trial numbers
    ``m["per_trial"]``), study and headline for ``record``. A claim whose cells the run did
    not have is left out; a record without per-trial numbers (before the shared rule) gets
    every claim untested, with ``to_remake`` saying how to re-make it."""
    claims = []
    for name, (cells, rule, baseline) in JUDGED.items():
        if not _tested(setup, cells, rule):
            continue
        if "per_trial" not in m:
            claims.append(judge(CLAIMS[name], None, to_remake=to_remake))
        elif HEADLINE_MODE not in setup.modes:
            claims.append(judge(CLAIMS[name], None, to_remake=(
                "this run did not compute the searched score: re-run with modes "
                "including search")))
        elif name in RECOVERED_ONLY and any(
                "recovered" not in r or r["recovered"] is None for r in m["per_trial"]
                if _in(r["cell"], cells)):
            claims.append(judge(CLAIMS[name], None, to_remake=(
                "the record does not say which trials' graphs the search recovers (runs "
                "before 2026-11-27): re-run it")))
        else:
            only = name in RECOVERED_ONLY
            a, b, _ = units(m["per_trial"], cells, rule, baseline, recovered_only=only)
            claims.append(judge(CLAIMS[name], a, b,
                                numbers=_numbers(m["per_trial"], cells, rule, baseline, only)))
    headline = [k for k in ("linear_validation_ood", f"linear_causal_{m['mode']}_ood",
                            "diabetes_validation_ood", f"diabetes_causal_{m['mode']}_ood")
                if k in m]
    network = "-".join(map(str, setup.hidden))
    return claims_summary(
        paper="Kyono & van der Schaar, Improving Model Robustness Using Causal Knowledge "
              "(arXiv 1911.12441, 2019)",
        paper_setting="random DAGs of 4 nodes (the official notebook), unit linear "
                      "mechanisms, 100 Keras MLPs 512-256 (ReLU, SGD 1e-4) per trial, 100 "
                      "repeats; Tetrad's FGES with the known edges required; Kaggle tables",
        measured=(f"random DAGs of {', '.join(map(str, setup.nodes))} nodes ({setup.dag}), "
                  f"{' and '.join(setup.mechanisms)} mechanisms with {setup.weights} weights, "
                  f"{plural(setup.repeats, 'trial')} per cell, {setup.candidates} MLPs "
                  f"{network} ({setup.network}, {setup.optimizer} {setup.lr:g}) per trial, "
                  f"top {setup.k}; diabetes {plural(setup.diabetes_repeats, 'trial')}; lab's "
                  "GES in place of Tetrad's FGES"),
        claims=claims, headline=headline)


NOTEBOOK = "notebooks/14_causal_selection.ipynb"
MINUTES = {"default": "4 to 5", "claim": "21"}  # the recorded runs' wall-clock here
PAPER_TRIAL_MINUTES = (7, 11)  # a paper trial took 7.3 and 11.3 min in the recorded runs


def remake(parameters: dict[str, Any]) -> str:
    """How to re-make a recorded run with its per-trial numbers: its command and about how
    long it ran here."""
    from pathlib import Path

    from lab.runs import notebook_parameters

    root = Path(__file__).resolve().parents[2]
    preset = parameters.get("preset", "default")
    defaults = {k: p.default for k, p in notebook_parameters(root / NOTEBOOK).items()}
    base = defaults | PRESETS[preset]
    extra = "".join(f" -p {k} {parameters[k]}" for k in PARAMETERS
                    if k != "preset" and k in parameters and parameters[k] != base.get(k))
    repeats = int(parameters.get("repeats", 3))
    minutes = (" to ".join(str(m * repeats) for m in PAPER_TRIAL_MINUTES) if preset == "paper"
               else MINUTES.get(preset, "5"))
    return ("the record has no per-trial out-of-domain errors (runs before the shared "
            f"verdict rule kept per-cell means only); re-run `python -m lab run {NOTEBOOK} "
            f"-p preset {preset}{extra}` (about {minutes} min here)")


def rederive(metrics: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's claims under today's declarations, from its recorded numbers
    (``python -m lab claims rederive``). Records from before the floored score was renamed
    (``unfloored`` among their parameters) had no ``guarded`` rule."""
    params = {k: v for k, v in parameters.items() if k in PARAMETERS}
    params.setdefault("guarded", False)
    setup = configure(**(params | {"preset": "default"}))  # recorded values, preset applied
    return summary(metrics, setup, to_remake="" if "per_trial" in metrics
                   else remake(parameters))


def describe(m: dict[str, Any], setup: Setup) -> str:
    """The claims' verdicts as Markdown, every number from ``m``."""
    lines = []
    for c in summary(m, setup)["claims"]:
        line = f"- **`{c['name']}`: {said(c, '+.4f')}**"
        if c["values"] is not None:
            line += (f": {c['statement']}. The effect is per "
                     f"{c['unit'].split(' (')[0].split(':')[0]}: log OOD MSE of the top k, "
                     f"{c['measure'].split(': ')[-1]}"
                     f"{' plus the margin' if c['threshold'] else ''}, oriented so that the "
                     f"claim is positive (family `{c['family']}`, Holm); the smallest that "
                     f"counts {c['minimum_effect']:g}. "
                     + "; ".join(f"{k}: {v}" for k, v in c["numbers"]) + ".")
        lines.append(line)
    return "\n".join(lines)


def curves(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per rule, the mean normalised OOD error of its selection in each (cell, shift), for
    the compare view (x: the row's index in ``m["table"]``), with its min-max over the
    trials where the table keeps it (records from 2026-11-28 on)."""
    rows = m["table"]
    labels = [f"{r['cell']}/{r['shift']}" for r in rows]
    out = {}
    for rule in rows[0]["rules"]:
        c = {"x": list(range(len(rows))), "labels": labels,
             "y": [r["rules"][rule]["normalised"] for r in rows],
             "xlabel": "cell / shift", "ylabel": "normalised OOD error of the top k"}
        ranges = [r["rules"][rule].get("normalised_range") for r in rows]
        if all(ranges):
            trials = sorted({r["trials"] for r in rows})
            c |= {"low": [lo for lo, _ in ranges], "high": [hi for _, hi in ranges],
                  "band": f"mean of {'/'.join(map(str, trials))} trials, band min-max"}
        out[f"{rule}_normalised_ood"] = c
    return out
