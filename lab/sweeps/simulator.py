"""Replay sweeps offline from recorded learning curves: the live sweeps' pruners, W
asynchronous workers, many random arrival orders, no training.

In a live sweep (``lab.sweeps.worker``) a trial trains its configuration phase by phase and
reports its metric after each phase; the study's pruner decides, from every value reported
so far, whether it goes on. Once each configuration's curve is recorded (its metric at the
end of every phase: ``Curves``), a sweep can be replayed without training: what changes
from one sweep to the next is only the order the sampler draws the configurations in and
which worker finishes which phase first.

``replay`` runs one sweep in virtual time. ``workers`` workers each take the next
configuration of ``order``; every phase is one unit of compute (each configuration trains
the same number of environment steps per phase) and lasts a random time around one unit,
so the workers drift apart as real ones do. Trials report to an in-memory Optuna study
whose pruner is the one a live sweep of that name uses (``lab.sweeps.study.make_pruner``):

- ``hypertrick``: ``HyperTrickPruner``, this project's rule;
- ``none``: random search, every trial runs every phase;
- ``asha``: Optuna's ``SuccessiveHalvingPruner``, which is asynchronous successive halving
  (ASHA; a live sweep calls it ``successive_halving``);
- ``hyperband``: Optuna's ``HyperbandPruner`` (ASHA brackets);
- ``median``: Optuna's ``MedianPruner``.

Synchronous successive halving (``sync_halving``) waits at a barrier after every rung, which
no pruner can express; ``replay`` schedules it itself: all trials train to the first rung,
the best 1/eta go on to the next, and so on.

A replay returns its trace (after every phase trained, the compute used so far, in whole
trials of ``phases`` phases, and the best final metric among the trials that ran every
phase) and how many phases each arrival trained.
``outcomes`` replays many random orders and gives, per method, the best final metric found
at each point of a compute grid.
"""

import dataclasses
import heapq
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import optuna

from lab.sweeps.spec import SweepSpec, load_spec
from lab.sweeps.study import make_pruner

METHODS = ("hypertrick", "none", "asha", "hyperband", "median", "sync_halving")
LIVE_NAMES = {"asha": "successive_halving"}  # the simulator's names -> the spec's pruners
JITTER = 0.2  # a phase lasts uniform(1 - JITTER, 1 + JITTER) units of virtual time


class CurveError(ValueError):
    """A curve file does not match its sweep's specification; the message says how."""


@dataclasses.dataclass(frozen=True)
class Curves:
    """Every configuration's metric at the end of each phase, and the spec that drew them.

    ``values[c, p]`` is configuration c's metric after phase p + 1 (the mean over its
    seeds); ``values[:, -1]`` is the final metric a trial that runs every phase reports."""

    spec: SweepSpec
    params: tuple[dict[str, Any], ...]
    values: np.ndarray  # (configurations, phases)
    evaluations: np.ndarray | None = None
    """Optional, everything measured: ``(configurations, seeds, evaluations)``."""

    @property
    def final(self) -> np.ndarray:
        return self.values[:, -1]

    @property
    def sign(self) -> float:
        """+1 when larger is better, -1 when smaller is."""
        return 1.0 if self.spec.direction == "maximize" else -1.0


def save_curves(path: str | Path, curves: Curves) -> Path:
    """Write curves as JSON (the spec as plain data, each configuration's parameters, its
    metric per phase and, if kept, every evaluation of every seed); refuses to overwrite a
    file that exists."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; choose another path or delete it first")
    values = np.asarray(curves.values, float)
    _check(curves.spec, list(curves.params), values, str(path))
    raw = {"spec": curves.spec.as_dict(), "params": list(curves.params),
           "values": _listed(values)}
    if curves.evaluations is not None:
        raw["evaluations"] = _listed(np.asarray(curves.evaluations, float))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw))
    return path


def _listed(x: np.ndarray) -> list:
    """Nested lists with None for NaN (JSON has no NaN)."""
    return np.where(np.isnan(x), None, x).tolist()


def load_curves(path: str | Path) -> Curves:
    """Read curves written by ``save_curves``, checked against their spec."""
    path = Path(path)
    if not path.is_file():
        raise CurveError(f"curve file {path} does not exist; record the curves first")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CurveError(f"{path} is not JSON ({err.msg}); give a file save_curves wrote") \
            from None
    if not isinstance(raw, dict) or {"spec", "params", "values"} - set(raw):
        raise CurveError(f"{path} needs the keys spec, params and values (save_curves)")
    spec = load_spec(raw["spec"], check_notebook=False)
    values = np.array(raw["values"], float)  # None -> NaN
    _check(spec, raw["params"], values, str(path))
    evaluations = raw.get("evaluations")
    if evaluations is not None:
        evaluations = np.array(evaluations, float)
        if evaluations.ndim != 3 or len(evaluations) != len(values):
            raise CurveError(f"{path}: evaluations must be (configurations, seeds, "
                             f"evaluations), got shape {evaluations.shape}")
    return Curves(spec, tuple(raw["params"]), values, evaluations)


def _check(spec: SweepSpec, params: list, values: np.ndarray, where: str) -> None:
    if values.ndim != 2 or values.shape[1] != spec.phases:
        raise CurveError(f"{where}: values must be (configurations, {spec.phases} phases), "
                         f"got shape {values.shape}")
    if len(params) != len(values) or not len(values):
        raise CurveError(f"{where}: {len(params)} parameter sets for {len(values)} curves; "
                         "give one per configuration, at least one")
    names = {d.name for d in spec.space}
    for i, p in enumerate(params):
        if not isinstance(p, dict) or set(p) != names:
            raise CurveError(f"{where}: configuration {i} has parameters "
                             f"{sorted(p) if isinstance(p, dict) else p!r}, the spec's "
                             f"space has {sorted(names)}")
        for d in spec.space:
            x = p[d.name]
            inside = x in d.values if d.kind == "choice" else d.low <= x <= d.high
            if not inside:
                raise CurveError(f"{where}: configuration {i}'s {d.name} = {x!r} is outside "
                                 "the spec's space; record curves of this spec")
    if np.isinf(values).any():
        raise CurveError(f"{where}: values hold infinities; record a finite metric")


# --- one sweep, replayed --------------------------------------------------------------------

class Replay(NamedTuple):
    trace: np.ndarray
    """(phases trained, 2): compute used in whole trials, the best final metric so far (NaN
    until a trial has run every phase)."""
    reached: np.ndarray
    """(trials,): the phases each arrival trained (``phases``: it ran to the end)."""


def replay(curves: Curves, method: str, order: np.ndarray, *, workers: int,
           survival: float | None = None, rng: np.random.Generator | None = None) -> Replay:
    """One sweep over the configurations ``order`` (indices into ``curves``, in the order
    the sampler draws them) with ``workers`` workers."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    rng = rng if rng is not None else np.random.default_rng(0)
    spec = dataclasses.replace(
        curves.spec, workers=workers, trials=len(order),
        survival=curves.spec.survival if survival is None else survival,
        pruner=LIVE_NAMES.get(method, method))
    if method == "sync_halving":
        return _sync_halving(curves, order, spec)
    reached = np.zeros(len(order), int)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # named as the live sweep's study: Optuna's Hyperband assigns a trial's bracket from a
    # hash of the study's name and the trial's number (an unnamed study gets a random name,
    # and replays of the same order then differed from one run to the next)
    study = optuna.create_study(direction=spec.direction, pruner=make_pruner(spec),
                                sampler=optuna.samplers.RandomSampler(0), study_name=spec.name)
    phases, order = spec.phases, list(order)
    events: list[tuple[float, int, int, int]] = []  # (time, worker, trial number, phase)
    running: dict[int, tuple[optuna.Trial, int]] = {}  # trial number -> (trial, config)
    trace, best, trained = [], math.nan, 0

    def start(worker: int, now: float) -> None:
        if order:
            trial = study.ask()
            running[trial.number] = (trial, order.pop(0))
            heapq.heappush(events, (now + _phase_time(rng), worker, trial.number, 1))

    for worker in range(workers):
        start(worker, 0.0)
    while events:
        now, worker, number, phase = heapq.heappop(events)
        trial, config = running[number]
        value = float(curves.values[config, phase - 1])
        trial.report(value, phase)
        trained, reached[number] = trained + 1, phase
        finished = phase == phases or trial.should_prune()
        if phase == phases:
            study.tell(trial, value)
            best = _better(best, value, curves.sign)
        elif finished:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            heapq.heappush(events, (now + _phase_time(rng), worker, number, phase + 1))
        trace.append((trained / phases, best))
        if finished:  # the worker takes the next configuration at once
            running.pop(number)
            start(worker, now)
    return Replay(np.array(trace).reshape(-1, 2), reached)


def _phase_time(rng: np.random.Generator) -> float:
    return float(rng.uniform(1 - JITTER, 1 + JITTER))


def _better(best: float, value: float, sign: float) -> float:
    if math.isnan(value):
        return best
    return value if math.isnan(best) or sign * value > sign * best else best


def rungs(phases: int, eta: int) -> list[int]:
    """Synchronous successive halving's rungs: the phases eta^k below ``phases``, then
    ``phases`` itself (4 phases, eta 2: 1, 2, 4)."""
    out, r = [], 1
    while r < phases:
        out.append(r)
        r *= eta
    return out + [phases]


def _sync_halving(curves: Curves, order: np.ndarray, spec: SweepSpec) -> Replay:
    """All trials to the first rung, the best 1/eta of them to the next, ... (each rung a
    barrier); ``eta`` as the live pruners take it from the survival rate."""
    eta = max(2, round(1 / spec.survival)) if spec.survival < 1 else 2
    alive, done, trace, best, trained = list(range(len(order))), 0, [], math.nan, 0
    reached = np.zeros(len(order), int)
    steps = rungs(spec.phases, eta)
    for k, rung in enumerate(steps):
        for arrival in alive:  # the rung's phases, trial after trial
            for phase in range(done + 1, rung + 1):
                trained, reached[arrival] = trained + 1, phase
                if phase == spec.phases:
                    value = float(curves.values[order[arrival], phase - 1])
                    best = _better(best, value, curves.sign)
                trace.append((trained / spec.phases, best))
        done = rung
        if k + 1 < len(steps):
            scores = curves.sign * curves.values[np.asarray(order)[alive], rung - 1]
            keep = max(1, len(alive) // eta)
            top = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")[:keep]
            alive = [alive[i] for i in sorted(top)]  # the survivors, in arrival order
    return Replay(np.array(trace).reshape(-1, 2), reached)


# --- many sweeps ---------------------------------------------------------------------------

def best_at(trace: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The best final metric found with at most each compute of ``grid`` (NaN where none)."""
    index = np.searchsorted(trace[:, 0], grid, side="right") - 1
    return np.where(index >= 0, trace[np.maximum(index, 0), 1], np.nan)


def outcomes(curves: Curves, methods: tuple[str, ...] = METHODS, *, orders: int = 1000,
             trials: int | None = None, workers: int = 2, grid: np.ndarray | None = None,
             seed: int = 0) -> dict[str, Any]:
    """Replay ``orders`` random orders of ``trials`` configurations (all by default) with
    every method: ``{"grid": compute, "best": {method: (orders, grid) best final metric},
    "compute": {method: (orders,) compute used}}``. Order k is the same for every method."""
    n = len(curves.values) if trials is None else trials
    if not 1 <= n <= len(curves.values):
        raise ValueError(f"trials must be between 1 and the {len(curves.values)} "
                         f"configurations recorded, got {n}")
    if orders < 1:
        raise ValueError(f"orders must be at least 1, got {orders}")
    grid = np.linspace(0, n, 4 * n + 1)[1:] if grid is None else np.asarray(grid, float)
    best = {m: np.empty((orders, len(grid))) for m in methods}
    used = {m: np.empty(orders) for m in methods}
    for k in range(orders):
        order = np.random.default_rng([seed, k]).permutation(len(curves.values))[:n]
        for m in methods:
            trace = replay(curves, m, order, workers=workers,
                           rng=np.random.default_rng([seed, k, 1])).trace
            best[m][k], used[m][k] = best_at(trace, grid), trace[-1, 0]
    return {"grid": grid, "best": best, "compute": used}
