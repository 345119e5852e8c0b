"""When does early termination pay? HyperTrick on its own workload (issue 21; notebook 08).

Heinrich & Frosio (2019) tuned GA3C with HyperTrick over the learning rate (log-uniform on
[1e-5, 1e-2]), t_max (quantised log-uniform integers on [2, 100]) and the discount (one of
0.9 ... 0.9999). Notebook 05 found HyperTrick worse than random search on MPO/Pendulum,
whose early returns rank configurations badly. Here the same question on the actor-critic
workload, answered from recorded learning curves:

1. ``sample_configs`` draws the configurations a live sweep with the same sampler seed
   tries, trial by trial (``lab.sweeps.TrialSeededSampler`` through an in-memory study);
2. ``a2c_curves`` trains them with the jitted A2C (notebook 07's workload,
   ``lab.experiments.a2c.curves``), ``mpo_curves`` the MPO/Pendulum configurations of
   notebook 05 (``lab.experiments.policy_improvement.train``): every evaluation of every
   seed, kept in a curve file beside the run's record;
3. ``correlations``: how well each evaluation ranks the configurations as the last one does
   (Spearman and Kendall);
4. ``misleading``: which settings look better (or worse) early than they end;
5. ``simulate``: sweeps replayed from the curves (``lab.sweeps.simulator``) with every method
   over many arrival orders, compared at equal compute;
6. ``live``: a live sweep of notebook 07, HyperTrick against random search on the compute
   HyperTrick used (``lab.experiments.sweeps.compare``), against the simulator's prediction
   for the same configurations.

The claims are declared once, as data (``CLAIMS``), and decided by the shared rule
(``lab.runs.verdict``), each from one number per unit: per replayed **arrival order**,
HyperTrick's best minus random search's on the same compute (a share of the configurations'
range of final metrics; non-inferiority within 2% of it), for A2C and for MPO; per
**configuration**, how far its rank after the first phase lands from its final rank, for A2C
and for MPO; per **live sweep**, how far its bests land outside the simulator's prediction.
Arrival orders replay the same recorded configurations, so those verdicts are about these
configurations, not about the space they were drawn from.

With ``checkpoint`` (on in ``claim``) what a run finishes is kept (:func:`kept`,
``lab.train.checkpoint.Kept``): each ``t_max`` group's A2C curves (its training state every
minute while it trains), each MPO configuration's run (its state after every evaluation,
through ``policy_improvement.train``) and the live sweep's result. A run stopped at a deadline
and resumed reads them back and continues an unfinished group from its last kept state, to
the same numbers. The live sweep's two studies (HyperTrick's, then random search's; about
9 minutes together in ``claim`` here) are each a unit: one that finished is read back from its
database under the run's folder with its seconds as measured then, an unfinished one is set
aside and run again; the finished pair is kept as one result.
"""

import dataclasses
import hashlib
import importlib
import inspect
import math
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from scipy import stats

from lab.experiments import a2c
from lab.runs.claims import (
    GREATER,
    LESS,
    PAIRED,
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
from lab.sweeps.hypertrick import TrialSeededSampler
from lab.sweeps.simulator import METHODS, Curves, load_curves, outcomes, replay
from lab.sweeps.spec import SweepSpec, load_spec
from lab.sweeps.worker import suggest
from lab.train import checkpoint as checkpoints

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

# the seed's HyperTrick search space for GA3C, as notebook 07's parameters
A2C_SPACE = {
    "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2},
    "t_max": {"type": "qloguniform", "low": 2, "high": 100, "q": 1},
    "discount": {"type": "choice",
                 "values": [0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999]},
}
# notebook 05's MPO/Pendulum space
MPO_SPACE = {
    "learning_rate": {"type": "loguniform", "low": 3e-5, "high": 3e-3},
    "n_step": {"type": "qloguniform", "low": 1, "high": 20, "q": 1},
    "discount": {"type": "choice", "values": [0.9, 0.95, 0.99, 0.995, 0.999]},
}


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # the scale, fitted to about an hour on 2 cores: 104 configurations (at least
    # 100) of 320,000 steps x 2 seeds (about 25 min of the A2C at 44,000 steps/s, plus 10 s of
    # compilation per t_max group), 1000 orders; MPO as notebook 05's claim (6,000 steps in
    # 4 phases)
    "claim": dict(configurations=104, total_steps=320_000, evaluations=16, orders=1000,
                  mpo_configurations=24, mpo_total_steps=6000, mpo_eval_every=500,
                  live_trials=10, checkpoint=True),
}
PARAMETERS = ("preset", "game", "configurations", "seeds", "envs", "total_steps",
              "evaluations", "phases", "survival", "workers", "orders", "mpo_configurations",
              "mpo_total_steps", "mpo_eval_every", "mpo_fixed", "live_trials", "sampler_seed",
              "curves_from", "checkpoint")


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything notebook 08 runs, validated."""

    a2c: SweepSpec  # notebook 07's sweep (its trials: the live sweep's size)
    mpo: SweepSpec  # notebook 05's MPO/Pendulum sweep
    configurations: int
    mpo_configurations: int
    orders: int
    live_trials: int
    curves_from: str
    preset: str
    checkpoint: bool = False
    """Keep each finished unit (:func:`kept`); a rerun (a resume) reads it back."""


def configure(**params: Any) -> Setup:
    """The notebook's parameters (``PARAMETERS``) as a ``Setup``; raises ValueError naming a
    bad one before any work (a curve file that does not exist or does not match included)."""
    p = with_preset(params, PRESETS)
    for name in ("configurations", "seeds", "envs", "evaluations", "orders", "workers",
                 "mpo_configurations", "mpo_eval_every"):
        if p[name] < 1:
            raise ValueError(f"{name} must be at least 1, got {p[name]}")
    if p["configurations"] < 3 or p["mpo_configurations"] < 3:
        raise ValueError("configurations and mpo_configurations must be at least 3 (a rank "
                         f"correlation needs them), got {p['configurations']} and "
                         f"{p['mpo_configurations']}")
    if p["evaluations"] % p["phases"]:
        raise ValueError(f"evaluations ({p['evaluations']}) must be a multiple of phases "
                         f"({p['phases']}), so that every phase ends at an evaluation")
    if p["total_steps"] % p["evaluations"]:
        raise ValueError(f"total_steps ({p['total_steps']}) must be a multiple of evaluations "
                         f"({p['evaluations']})")
    if p["mpo_total_steps"] % (p["phases"] * p["mpo_eval_every"]):
        raise ValueError(f"mpo_total_steps ({p['mpo_total_steps']}) must be a multiple of "
                         f"phases x mpo_eval_every ({p['phases']} x {p['mpo_eval_every']})")
    if not 0 <= p["live_trials"] <= p["configurations"]:
        raise ValueError(f"live_trials must be between 0 (no live sweep) and configurations "
                         f"({p['configurations']}), got {p['live_trials']}")
    a2c_sweep = a2c_spec(game=p["game"], envs=p["envs"], seeds=p["seeds"],
                         total_steps=p["total_steps"], evaluations=p["evaluations"],
                         phases=p["phases"], survival=p["survival"],
                         trials=max(p["live_trials"], 1), workers=p["workers"],
                         seed=p["sampler_seed"])
    mpo_sweep = mpo_spec(total_steps=p["mpo_total_steps"], eval_every=p["mpo_eval_every"],
                         phases=p["phases"], survival=p["survival"],
                         trials=p["mpo_configurations"], workers=p["workers"],
                         fixed=p.get("mpo_fixed") or {})
    if p["curves_from"]:
        recorded = load_curves(p["curves_from"])  # CurveError names what does not match
        if recorded.spec.space != a2c_sweep.space or recorded.spec.phases != p["phases"]:
            raise ValueError(f"{p['curves_from']} holds curves of another sweep (space or "
                             "phases differ); record new ones (curves_from = '')")
    return Setup(a2c_sweep, mpo_sweep, p["configurations"], p["mpo_configurations"],
                 p["orders"], p["live_trials"], p["curves_from"], params.get("preset", "default"),
                 bool(p.get("checkpoint", False)))


# --- the configurations and their curves ---------------------------------------------------

def a2c_spec(*, game: str, envs: int, seeds: int, total_steps: int, evaluations: int,
             phases: int, survival: float, trials: int, workers: int, seed: int = 0,
             name: str = "a2c") -> SweepSpec:
    """The sweep of notebook 07 over ``A2C_SPACE`` (checked against the notebook)."""
    return load_spec({
        "name": name, "notebook": str(NOTEBOOKS / "07_a2c.ipynb"),
        "metric": "a2c_final_return", "direction": "maximize", "space": A2C_SPACE,
        "fixed": {"game": game, "envs": envs, "seeds": seeds, "total_steps": total_steps,
                  "eval_every": total_steps // evaluations},
        "phases": phases, "survival": survival, "trials": trials, "workers": workers,
        "seed": seed})


def mpo_spec(*, total_steps: int, eval_every: int, phases: int, survival: float,
             trials: int, workers: int, fixed: dict | None = None) -> SweepSpec:
    """Notebook 05's sweep of MPO on Pendulum (notebook 04, one seed, no comparison; ``fixed``
    sets more of notebook 04's parameters, such as ``widths``)."""
    return load_spec({
        "name": "mpo", "notebook": str(NOTEBOOKS / "04_policy_improvement.ipynb"),
        "metric": "mpo_final_return", "direction": "maximize", "space": MPO_SPACE,
        "fixed": {"agent": "mpo", "compare": False, "seeds": 1, "total_steps": total_steps,
                  "eval_every": eval_every} | (fixed or {}),
        "phases": phases, "survival": survival, "trials": trials, "workers": workers})


def sample_configs(spec: SweepSpec, n: int, seed: int) -> list[dict[str, Any]]:
    """The parameters trials 0 .. n-1 of a live sweep of ``spec`` with sampler seed ``seed``
    draw (the calls a worker makes, on an in-memory study)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=TrialSeededSampler(seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(suggest(trial, spec))
        study.tell(trial, 0.0)
    return out


def phase_values(evaluations: np.ndarray, phases: int) -> np.ndarray:
    """``(configurations, phases)``: the mean over seeds of the evaluation that ends each
    phase (what a trial reports to its sweep)."""
    n = evaluations.shape[-1]
    if n % phases:
        raise ValueError(f"{n} evaluations do not split into {phases} phases; make the "
                         "evaluations a multiple of the phases")
    ends = np.arange(1, phases + 1) * (n // phases) - 1
    with np.errstate(all="ignore"):
        return np.nanmean(evaluations[:, :, ends], axis=1)


def a2c_curves(spec: SweepSpec, configs: list[dict[str, Any]], *, sticky: float = 0.1,
               seed: int = 0, progress: Callable | None = None,
               kept: checkpoints.Kept | None = None) -> Curves:
    """Train ``configs`` as ``spec``'s trials would (notebook 07 with ``spec.fixed``). With
    ``kept`` (:func:`kept`) each ``t_max`` group's curves are kept once trained and read back
    by a rerun, and a group in training saves its state as it goes and continues from it
    (``lab.experiments.a2c.curves``'s ``kept``)."""
    f = spec.fixed
    evaluations = f["total_steps"] // f["eval_every"]
    returns, _ = a2c.curves(configs, game=f["game"], sticky=sticky, envs=f["envs"],
                            steps=f["total_steps"], evaluations=evaluations, seeds=f["seeds"],
                            seed=seed, progress=progress, kept=kept)
    return Curves(spec, tuple(configs), phase_values(returns, spec.phases), returns)


def mpo_curves(spec: SweepSpec, configs: list[dict[str, Any]],
               progress: Callable | None = None,
               kept: checkpoints.Kept | None = None) -> Curves:
    """Train ``configs`` as ``spec``'s trials would (notebook 04's MPO, one seed each). With
    ``kept`` (:func:`kept`) each configuration's run is kept as notebook 04 keeps a variant
    (``policy_improvement.train``: its state after every evaluation, its history once
    finished) and read back by a rerun."""
    from lab.experiments import policy_improvement as pi
    from lab.runs import notebook_parameters

    names = inspect.signature(pi.configure).parameters
    defaults = {k: p.default for k, p in notebook_parameters(
        NOTEBOOKS / "04_policy_improvement.ipynb").items() if k in names}
    rows, start = [], time.perf_counter()
    for i, c in enumerate(configs):
        setup = pi.configure(**(defaults | spec.fixed | c))
        result = pi.train(setup, setup.variant(setup.focus), kept=kept)
        h = result.history  # evaluations after 0, eval_every, ... steps: drop the first
        rows.append(np.asarray(h.mean_returns, float)[np.asarray(h.env_steps) > 0][None])
        if progress is not None:
            progress(i + 1, len(configs), time.perf_counter() - start)
    returns = np.stack(rows)  # (configs, 1, evaluations)
    return Curves(spec, tuple(configs), phase_values(returns, spec.phases), returns)


def kept(setup: Setup, workload: str) -> checkpoints.Kept:
    """Where ``workload`` (``"a2c"``, ``"mpo"`` or ``"live"``) keeps its finished units
    (``setup.checkpoint``; otherwise a ``Kept`` that keeps nothing), in a folder named by
    what else defines them: the versions of jax, equinox, optax and gymnax, the devices'
    kind and the source of the code that computes them (an edit there makes them again);
    the live sweep's also by notebook 07's bytes (its trials run it)."""
    if not setup.checkpoint:
        return checkpoints.Kept(None)
    a2c_code = [a2c, "lab.train.a2c", "lab.envs.minatar", "lab.envs.control",
                "lab.models.ga3c", "lab.rl.a3c", "lab.rl.returns"]
    names = {"a2c": a2c_code,
             "mpo": ["lab.experiments.policy_improvement", "lab.train.mpo", "lab.train.rl_loop",
                     "lab.train.nstep_replay", "lab.rl.mpo", "lab.rl.search", "lab.rl.returns",
                     "lab.models.policy", "lab.envs.control", "lab.envs.rollout",
                     "lab.parallel"],
             "live": [*a2c_code, "lab.experiments.sweeps", "lab.sweeps.worker",
                      "lab.sweeps.study", "lab.sweeps.hypertrick", "lab.sweeps.phases",
                      "lab.sweeps.report", "lab.runs.runner"]}[workload]
    modules = [importlib.import_module(m) if isinstance(m, str) else m for m in names]
    try:
        gymnax = metadata.version("gymnax")
    except metadata.PackageNotFoundError:
        gymnax = None
    parts = [workload, gymnax, checkpoints.sources(*modules)]
    if workload == "live":
        parts.append(hashlib.sha256((NOTEBOOKS / "07_a2c.ipynb").read_bytes()).hexdigest())
    return checkpoints.Kept(checkpoints.folder("early_termination", *parts))


# --- how predictive are early phases -------------------------------------------------------

def correlations(evaluations: np.ndarray) -> dict[str, np.ndarray]:
    """Spearman's and Kendall's rank correlation between each evaluation's metric (mean over
    seeds) and the last one's, over the configurations measured at both."""
    with np.errstate(all="ignore"):
        mean = np.nanmean(evaluations, axis=1)  # (configurations, evaluations)
    final = mean[:, -1]
    out = {"spearman": [], "kendall": []}
    for e in range(mean.shape[1]):
        ok = np.isfinite(mean[:, e]) & np.isfinite(final)
        if ok.sum() < 3:
            out["spearman"].append(np.nan)
            out["kendall"].append(np.nan)
            continue
        with warnings.catch_warnings():  # constant values: NaN, as no ranking
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            out["spearman"].append(stats.spearmanr(mean[ok, e], final[ok]).statistic)
            out["kendall"].append(stats.kendalltau(mean[ok, e], final[ok]).statistic)
    return {k: np.array(v, float) for k, v in out.items()}


def first_phase(curves: Curves, ranked: dict[str, np.ndarray] | None = None
                ) -> dict[str, float]:
    """Spearman's and Kendall's correlation between the first phase's end and the final
    evaluation (``ranked``: ``correlations`` of the curves, if already computed)."""
    ranked = correlations(curves.evaluations) if ranked is None else ranked
    end = curves.evaluations.shape[2] // curves.spec.phases - 1
    return {kind: float(values[end]) for kind, values in ranked.items()}


def percentiles(values: np.ndarray) -> np.ndarray:
    """Each configuration's rank among the finite values as a percentile (1: the best)."""
    ok = np.isfinite(values)
    out = np.full(values.shape, np.nan)
    out[ok] = (stats.rankdata(values[ok]) - 1) / max(ok.sum() - 1, 1)
    return out


def misleading(curves: Curves, phase: int = 1) -> list[dict[str, Any]]:
    """For each value of each searched parameter (numbers in three log-spaced bins): how
    many configurations, their mean percentile after ``phase`` and at the end, and the mean
    of the difference (early - final; positive: looks better early than it ends)."""
    early = percentiles(curves.sign * curves.values[:, phase - 1])
    final = percentiles(curves.sign * curves.final)
    rows = []
    for d in curves.spec.space:
        x = np.array([p[d.name] for p in curves.params], float)
        if d.kind == "choice":
            groups = [(f"{v:g}", x == v) for v in d.values]
        else:
            edges = np.geomspace(d.low, d.high, 4)
            groups = [(f"{lo:.3g}-{hi:.3g}", (x >= lo) & (x <= hi))
                      for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
        for label, member in groups:
            ok = member & np.isfinite(early) & np.isfinite(final)
            if ok.any():
                rows.append({"parameter": d.name, "value": label, "configurations": int(ok.sum()),
                             "early": float(early[ok].mean()), "final": float(final[ok].mean()),
                             "early_minus_final": float((early[ok] - final[ok]).mean())})
    return rows


# --- sweeps replayed, and one live ---------------------------------------------------------

def simulate(curves: Curves, *, orders: int, workers: int, trials: int | None = None,
             methods: tuple[str, ...] = METHODS, seed: int = 0) -> dict[str, Any]:
    """Every method over ``orders`` arrival orders; per method its mean compute, mean best
    final metric, and how often it was at least random search's best on the same compute
    (random search: the same order, run without termination, read at that compute); per
    method and order the two bests (``per_order``). ``at_least_random_ci`` is that share's
    95% interval over the orders (``share_interval``)."""
    out = outcomes(curves, methods, orders=orders, trials=trials, workers=workers, seed=seed)
    grid, rows, per_order = out["grid"], [], {}
    for m in methods:
        used = out["compute"][m]
        at = np.minimum(np.searchsorted(grid, used - 1e-9), len(grid) - 1)
        mine = out["best"][m][:, -1]
        random_there = out["best"]["none"][np.arange(len(used)), at]
        sign = curves.sign
        with np.errstate(invalid="ignore"):
            ahead = np.where(np.isnan(mine), False, ~(sign * mine < sign * random_there))
        rows.append({"method": m, "compute": float(used.mean()),
                     "best": float(np.nanmean(mine)), "best_q10": float(np.nanquantile(mine, 0.1)),
                     "best_q90": float(np.nanquantile(mine, 0.9)),
                     "random_at_same_compute": float(np.nanmean(random_there)),
                     "at_least_random": float(ahead.mean()),
                     "at_least_random_ci": share_interval(ahead)})
        per_order[m] = {"best": mine, "random": random_there}
    return out | {"rows": rows, "per_order": per_order}


def share_interval(ahead: np.ndarray) -> list[float]:
    """The 95% Wilson score interval of the share of ``ahead`` (one bool per arrival order):
    how precisely the simulated orders pin the share down for these curves (not how it
    would vary with curves recorded again)."""
    ci = stats.binomtest(int(np.sum(ahead)), len(ahead)).proportion_ci(0.95, method="wilson")
    return [float(ci.low), float(ci.high)]


NOISE = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)  # break_even's levels, in the finals' spread


def break_even(curves: Curves, *, orders: int, workers: int,
               noise: tuple[float, ...] = NOISE, methods: tuple[str, ...] = ("hypertrick", "asha"),
               seed: int = 0) -> list[dict[str, Any]]:
    """When does early termination pay? Synthetic curves that end where the recorded ones do
    but whose earlier phases rank the configurations more or less well: each earlier phase is
    the final metric plus Gaussian noise of ``noise`` times the finals' standard deviation
    (0: early rank equals final rank), and a last level whose earlier phases are the finals
    mirrored (early rank reversed). Per level: Spearman's rho between the first phase and
    the final metric, and each method's share of ``orders`` at least as good as random
    search on its compute (``simulate``), with its interval (``_ci``)."""
    final = curves.final
    spread = float(np.nanstd(final)) or 1.0
    rng = np.random.default_rng(seed)
    levels = [(f"noise {s:g}", final[:, None] + s * spread * rng.standard_normal(
        (len(final), curves.spec.phases - 1))) for s in noise]
    levels.append(("reversed", np.repeat((2 * np.nanmean(final) - final)[:, None],
                                         curves.spec.phases - 1, axis=1)))
    rows = []
    for label, early in levels:
        synthetic = Curves(curves.spec, curves.params, np.column_stack([early, final]))
        ok = np.isfinite(early[:, 0]) & np.isfinite(final)
        with warnings.catch_warnings():  # constant values: NaN, as no ranking
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            rho = (stats.spearmanr(early[ok, 0], final[ok]).statistic if ok.sum() >= 3
                   else np.nan)
        sim = simulate(synthetic, orders=orders, workers=workers,
                       methods=(*methods, "none"), seed=seed)
        rows.append({"level": label, "spearman_phase1": float(rho)} | {
            f"{r['method']}_at_least_random{part}": r[f"at_least_random{part}"]
            for r in sim["rows"] if r["method"] != "none" for part in ("", "_ci")} | {
            f"{r['method']}_compute": r["compute"] for r in sim["rows"]})
    return rows


def threshold(rows: list[dict[str, Any]], method: str = "hypertrick",
              share: float = 0.5) -> float | None:
    """The smallest first-phase Spearman's rho among ``break_even`` levels from which on
    (every level with a larger rho included) ``method`` is at least random search on
    ``share`` of the orders; None if no level qualifies."""
    ranked = sorted((r for r in rows if np.isfinite(r["spearman_phase1"])),
                    key=lambda r: -r["spearman_phase1"])
    found = None
    for r in ranked:
        if r[f"{method}_at_least_random"] < share:
            break
        found = r["spearman_phase1"]
    return found


def predict_live(curves: Curves, trials: int, *, workers: int, replays: int = 200,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """The simulator's prediction for a live sweep of the first ``trials`` configurations
    (a live sweep with the curves' sampler seed draws exactly those): over ``replays``
    random worker timings, HyperTrick's best and compute, and random search's best on
    ``floor(compute)`` whole trials, as ``lab.experiments.sweeps.compare`` runs them."""
    order = np.arange(trials)
    best, used, random = [], [], []
    for k in range(replays):
        r = replay(curves, "hypertrick", order, workers=workers,
                   rng=np.random.default_rng([seed, k]))
        best.append(r.trace[-1, 1])
        used.append(r.trace[-1, 0])
        whole = max(1, math.floor(used[-1] + 1e-9))
        rs = replay(curves, "none", order[:whole], workers=workers).trace
        random.append(rs[-1, 1])
    return {"hypertrick_best": np.array(best), "hypertrick_compute": np.array(used),
            "random_best": np.array(random)}


def live(spec: SweepSpec, out: Path, storage: str | None = None,
         kept: checkpoints.Kept | None = None) -> dict[str, Any]:
    """HyperTrick then random search on its compute, live (SQLite, ``spec.workers``). With
    ``kept`` (:func:`kept`) the result is kept once finished and read back by a rerun (its
    outcome and seconds as measured then); a rerun after an unfinished live sweep reads back
    a study that finished (HyperTrick's, about half the sweep) and sets an unfinished one's
    database aside (``*.interrupted.db``) to run it again (``sweeps.compare``'s ``reuse``)."""
    from lab.experiments import sweeps

    def make():
        reuse = kept is not None and kept.folder is not None and storage is None
        pair = sweeps.compare(spec, spec.seed, out, storage=storage, name=spec.name,
                              reuse=reuse)
        m = sweeps.verdict(spec, [pair])
        return m["comparisons"][0] | {"hypertrick_seconds": m["hypertrick_seconds"][0],
                                      "random_seconds": m["random_seconds"][0]}

    if kept is None:
        return make()
    data = spec.as_dict() | {"notebook": Path(spec.notebook).name}
    return kept(["live", data], make, "live-")


def within(value: float, sample: np.ndarray, low: float = 0.05, high: float = 0.95) -> bool:
    """``value`` inside the ``low``-``high`` quantile range of ``sample`` (a tolerance of
    1e-6 for ties with the edges)."""
    lo, hi = np.nanquantile(sample, [low, high])
    return bool(lo - 1e-6 <= value <= hi + 1e-6)


# --- the verdict ---------------------------------------------------------------------------

def verdict(a2c_curves: Curves, mpo_curves: Curves, simulated: dict[str, Any],
            live_result: dict[str, Any] | None, prediction: dict[str, np.ndarray] | None,
            mpo_simulated: dict[str, Any] | None = None,
            break_even_rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The numbers of the claims and the rule of thumb (every figure measured)."""
    m: dict[str, Any] = {"configurations": len(a2c_curves.values),
                         "seeds": int(a2c_curves.evaluations.shape[1]),
                         "evaluations": int(a2c_curves.evaluations.shape[2]),
                         "phases": a2c_curves.spec.phases,
                         "survival": a2c_curves.spec.survival,
                         "mpo_configurations": len(mpo_curves.values)}
    for name, c in (("a2c", a2c_curves), ("mpo", mpo_curves)):
        r = correlations(c.evaluations)
        m[f"{name}_spearman"], m[f"{name}_kendall"] = r["spearman"].tolist(), r["kendall"].tolist()
        for kind, rho in first_phase(c, r).items():
            m[f"{name}_{kind}_phase1"] = rho
    m["a2c_misleading"] = misleading(a2c_curves)
    rows = {r["method"]: r for r in simulated["rows"]}
    m["simulated"] = simulated["rows"]
    m["orders"] = len(simulated["compute"]["none"])
    ht = rows["hypertrick"]
    m["hypertrick_compute"], m["hypertrick_best"] = ht["compute"], ht["best"]
    m["random_best_at_hypertrick_compute"] = ht["random_at_same_compute"]
    m["hypertrick_at_least_random"] = ht["at_least_random"]
    m["random_best_full"] = rows["none"]["best"]
    for name, c, sim in (("a2c", a2c_curves, simulated), ("mpo", mpo_curves, mpo_simulated)):
        m[f"{name}_final_range"] = final_range(c.values)
        m[f"{name}_phase1_displacement"] = displacement(c.values, c.sign)
        if sim is not None and "per_order" in sim:
            order = sim["per_order"]["hypertrick"]
            m[f"{name}_order_hypertrick_best"] = _plain_list(order["best"])
            m[f"{name}_order_random_best"] = _plain_list(order["random"])
    if mpo_simulated is not None:
        m["mpo_simulated"] = mpo_simulated["rows"]
        mpo_rows = {r["method"]: r for r in mpo_simulated["rows"]}
        m["mpo_hypertrick_at_least_random"] = mpo_rows["hypertrick"]["at_least_random"]
        m["mpo_hypertrick_compute"] = mpo_rows["hypertrick"]["compute"]
    if break_even_rows is not None:
        m["break_even"] = break_even_rows
        m["hypertrick_threshold"] = threshold(break_even_rows, "hypertrick")
        m["asha_threshold"] = threshold(break_even_rows, "asha")
    m["best_method"] = max((r for r in simulated["rows"] if r["method"] != "none"),
                           key=lambda r: r["at_least_random"])["method"]
    if live_result is not None and prediction is not None:
        m["live"] = live_result
        m["live_predicted_hypertrick_best"] = [float(np.nanquantile(
            prediction["hypertrick_best"], q)) for q in (0.05, 0.5, 0.95)]
        m["live_predicted_random_best"] = [float(np.nanquantile(
            prediction["random_best"], q)) for q in (0.05, 0.5, 0.95)]
    return m


def _plain_list(x: np.ndarray) -> list:
    return np.where(np.isnan(x), None, x).tolist()  # JSON has no NaN


def final_range(values: np.ndarray) -> float:
    """The range of the configurations' final metrics (max - min over the finite ones)."""
    final = np.asarray(values, float)[:, -1]
    return float(np.nanmax(final) - np.nanmin(final))


def displacement(values: np.ndarray, sign: float = 1.0) -> list[float]:
    """Per configuration, how far its percentile rank after the first phase lies from its
    final percentile rank (``|early - final|``, 0 to 1; configurations with a missing value
    left out). Tied first-phase values carry no ranking, so ties are broken against the
    claim: in the order opposite to the final ranks."""
    v = np.asarray(values, float)
    ok = np.isfinite(v[:, 0]) & np.isfinite(v[:, -1])
    early, final = sign * v[ok, 0], sign * v[ok, -1]
    final_rank = stats.rankdata(final, method="average")
    early_rank = np.empty(len(early))
    early_rank[np.lexsort((-final_rank, early))] = np.arange(len(early))
    n = max(len(early) - 1, 1)
    return (np.abs(early_rank / n - (final_rank - 1) / n)).tolist()


def random_displacement(n: int) -> float:
    """The mean of :func:`displacement` when the first phase ranks ``n`` configurations at
    random: ``E|i - j| / (n - 1)`` for independent uniform ranks, ``(n + 1) / (3 n)``."""
    return (n + 1) / (3 * n)


def outside(value: float, predicted: list[float]) -> float:
    """How far ``value`` lies outside the ``[5%, 95%]`` of a prediction ``[5%, 50%, 95%]``
    (0 inside)."""
    low, high = predicted[0], predicted[-1]
    return float(max(low - value, value - high, 0.0))


def rule_of_thumb(m: dict[str, Any]) -> str:
    """Which early termination to choose, from the correlations and replays measured."""
    a2c_rho, mpo_rho = m["a2c_spearman_phase1"], m["mpo_spearman_phase1"]
    text = (f"Train a few configurations to the end first and measure how well the first "
            f"phase ranks them as the end does (Spearman's rho). Here: A2C/MinAtar "
            f"{a2c_rho:.2f}, where HyperTrick was at least random search on its compute on "
            f"{m['hypertrick_at_least_random']:.0%} of the replayed orders")
    if "mpo_hypertrick_at_least_random" in m:
        text += (f"; MPO/Pendulum {mpo_rho:.2f}, where it was on "
                 f"{m['mpo_hypertrick_at_least_random']:.0%}")
    text += ". "
    if "break_even" in m:
        cut = {k: m[f"{k}_threshold"] for k in ("hypertrick", "asha")}
        reached = {k: (f"from rho {v:.2f} up" if v is not None else "at no level measured")
                   for k, v in cut.items()}
        text += (f"On the A2C configurations with their earlier phases made more or less "
                 f"predictive (break-even table), HyperTrick was at least random search on "
                 f"half of the orders {reached['hypertrick']}, ASHA {reached['asha']}. ")
    text += ("So: where the first phase's rho is above that, early termination pays; "
             "choose HyperTrick when workers finish at different times and no barrier is "
             "wanted, ASHA for geometric rungs (more, shorter early trials). Where it is "
             "below, or where the settings that look best early are the ones that plateau "
             "lower (the misleading-settings table: short horizons, low discounts), run "
             "every configuration to the end or make the first phase longer.")
    return text


PAPER = ("Heinrich & Frosio, Metaoptimization on a Distributed System for Deep "
         "Reinforcement Learning (2019): HyperTrick")
PAPER_SETTING = "GA3C on Atari games, trials spread over many machines"
ABSTRACT = ("When compared with state-of-the-art metaoptimization algorithms, HyperTrick is "
            "characterized by a simpler implementation and it allows learning similar "
            "policies, while making a more effective use of the computational resources in a "
            "distributed system.")
MARGIN = 0.02  # non-inferiority: 2% of the range of the configurations' final metrics
AS_GOOD = dict(
    quote=ABSTRACT, source="Heinrich & Frosio 2019, Abstract",
    unit="arrival order (one replayed HyperTrick sweep and random search on the same order, "
         "read at HyperTrick's compute)",
    measure="HyperTrick's best final metric minus random search's on the compute HyperTrick "
            "used, each divided by the range of the configurations' final metrics",
    comparison=PAIRED, direction=GREATER, threshold=-MARGIN, minimum_effect=0.0,
    minimum_effect_source="stated: non-inferiority within 2% of the range of final metrics "
                          "(notebook 05's margin, 25 of Pendulum's ~1,200, in the same "
                          "proportion); the paper reports similar Atari scores, no margin",
    family="as_good_on_less_compute",
    declared_after="2026-11-27 (issue 55), after the 2026-11-23 and 2026-11-25 claim runs")
EARLY = dict(
    quote="(not found in the stored text of the paper) HyperTrick terminates a trial at the "
          "end of a phase unless its metric ranks in the top fraction of those reported at "
          "that phase, which pays where early phases rank the configurations as the end does",
    source="Heinrich & Frosio 2019, Sec. 3 (HyperTrick's phases); issue 21",
    unit="configuration",
    measure="|percentile rank after the first phase - final percentile rank| (0 to 1; tied "
            "first-phase values broken against the final order)",
    comparison=THRESHOLD, direction=LESS, minimum_effect=0.1,
    minimum_effect_source="stated: 0.1 below a random ranking's (n + 1) / 3n (about 1/3), "
                          "what a first-phase Spearman of 0.5 gives under a Gaussian copula "
                          "(mean displacement 0.226): the floor the module's comparison used "
                          "since it was written",
    family="early_phases_predict",
    declared_after="2026-11-27 (issue 55), after the 2026-11-23 and 2026-11-25 claim runs")
CLAIMS = declarations(
    Declaration(name="as_good_on_less_compute",
                statement="On its own workload (A2C on MinAtar, the seed's GA3C space), "
                          "HyperTrick finds a configuration at least as good as random search "
                          "on the compute HyperTrick used (within 2% of the range)", **AS_GOOD),
    Declaration(name="as_good_on_less_compute_mpo",
                statement="On MPO/Pendulum (notebook 05's space), HyperTrick finds a "
                          "configuration at least as good as random search on the compute "
                          "HyperTrick used (within 2% of the range)", **AS_GOOD),
    Declaration(name="early_phases_predict",
                statement="The first phase ranks A2C configurations as the end does: closer "
                          "than a random ranking by at least 0.1", **EARLY),
    Declaration(name="early_phases_predict_mpo",
                statement="The first phase ranks MPO/Pendulum configurations as the end does: "
                          "closer than a random ranking by at least 0.1", **EARLY),
    Declaration(name="simulator_predicts_live",
                statement="The replay simulator predicts a live sweep's bests (HyperTrick's "
                          "and random search's) within its 5-95% range",
                quote="(the lab's claim, not the paper's) The simulator predicts both from "
                      "the recorded curves over 200 random worker timings.",
                source="notebook 08, 'A live sweep against the simulator's prediction' "
                       "(issue 21)",
                unit="live sweep (one sampler seed)",
                measure="the larger of the two live bests' distances outside the predicted "
                        "5-95% range, divided by the range of the configurations' final "
                        "metrics (0 inside)",
                comparison=THRESHOLD, direction=LESS, threshold=MARGIN, minimum_effect=0.0,
                minimum_effect_source="stated: inside the range, within the same 2% "
                                      "tolerance as the other claims",
                family="simulator_predicts_live",
                declared_after="2026-11-27 (issue 55), after the 2026-11-23 and 2026-11-25 "
                               "claim runs (within the 5-95% range was older)"),
)


def summary(m: dict[str, Any]) -> dict[str, Any]:
    """The claims, study and headline for ``record``, decided by the shared rule from
    :func:`verdict`'s per-unit numbers (``rederive`` fills them in for older records)."""
    claims = []
    for name, prefix, label in (("as_good_on_less_compute", "a2c", "A2C"),
                                ("as_good_on_less_compute_mpo", "mpo", "MPO")):
        scale = m[f"{prefix}_final_range"] or 1.0
        best, random = m.get(f"{prefix}_order_hypertrick_best"), m.get(
            f"{prefix}_order_random_best")
        key = "" if prefix == "a2c" else "mpo_"
        if f"{key}hypertrick_at_least_random" not in m:
            continue  # this workload was not replayed
        numbers = {"HyperTrick at least random search, share of orders":
                   m[f"{key}hypertrick_at_least_random"],
                   "HyperTrick compute (whole trials)": m[f"{key}hypertrick_compute"],
                   f"range of {label}'s final metrics": m[f"{prefix}_final_range"]}
        if best is None:
            claims.append(judge(CLAIMS[name], None, numbers=numbers, to_remake=m.get(
                f"{prefix}_to_remake", "the record has no per-order bests; re-run -p preset "
                "claim (about 2 h 18 min on 2 shared cores)")))
            continue
        pairs = [(b, r) for b, r in zip(best, random, strict=True)
                 if b is not None and r is not None]
        claims.append(judge(CLAIMS[name], [b / scale for b, _ in pairs],
                            [r / scale for _, r in pairs], numbers=numbers | {
                                "HyperTrick best (mean)": float(np.mean([b for b, _ in pairs])),
                                "random search best on that compute (mean)":
                                    float(np.mean([r for _, r in pairs]))}))
    for name, prefix, label in (("early_phases_predict", "a2c", "A2C"),
                                ("early_phases_predict_mpo", "mpo", "MPO")):
        d = m[f"{prefix}_phase1_displacement"]
        claims.append(judge(CLAIMS[name], d, threshold=random_displacement(len(d)), numbers={
            f"Spearman after phase 1: {label}": m[f"{prefix}_spearman_phase1"],
            f"Kendall after phase 1: {label}": m[f"{prefix}_kendall_phase1"],
            "mean displacement of a random ranking": random_displacement(len(d))}))
    if "live" in m:
        live, scale = m["live"], m["a2c_final_range"] or 1.0
        gaps = {k: outside(live[f"{k}_best"], m[f"live_predicted_{k}_best"])
                for k in ("hypertrick", "random")}
        claims.append(judge(CLAIMS["simulator_predicts_live"], [max(gaps.values()) / scale],
                            numbers={"live HyperTrick best": live["hypertrick_best"],
                                     "predicted 5/50/95%": str([round(x, 3) for x in
                                                                m["live_predicted_hypertrick_best"]]),
                                     "live random best": live["random_best"],
                                     "predicted 5/50/95% ": str([round(x, 3) for x in
                                                                 m["live_predicted_random_best"]])}))
    return claims_summary(
        paper=PAPER, paper_setting=PAPER_SETTING,
        measured=(f"{plural(m['configurations'], 'configuration')} of the jitted A2C on "
                  f"MinAtar ({plural(m['seeds'], 'seed')}), {m['phases']} phases, survival "
                  f"{m['survival']}, {m['orders']} replayed orders; "
                  f"{plural(m['mpo_configurations'], 'MPO/Pendulum configuration')}"),
        claims=claims,
        headline=["a2c_spearman_phase1", "mpo_spearman_phase1", "hypertrick_at_least_random",
                  "hypertrick_compute", "best_method"],
        labels={"a2c_spearman_phase1": "A2C: first phase's rank correlation with the end",
                "mpo_spearman_phase1": "MPO: first phase's rank correlation with the end",
                "hypertrick_at_least_random": "HyperTrick at least as good as random search",
                "hypertrick_compute": "HyperTrick's compute (whole trials)",
                "best_method": "best method (simulated)"})


def rederive(metrics: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's claims under today's declarations (``python -m lab claims
    rederive``). Records from before the shared rule hold no per-unit numbers; they are
    computed from what the record holds: each configuration's phase values (``a2c_curves``,
    ``mpo_curves``) give the displacements, and replaying them (the same orders and worker
    timings, seeded) gives the per-order bests, kept only where the replay reproduces the
    recorded shares and means exactly."""
    setup = configure(**parameters)
    m = dict(metrics)
    for prefix, spec, key in (("a2c", setup.a2c, ""), ("mpo", setup.mpo, "mpo_")):
        recorded = m.get(f"{prefix}_curves")
        if recorded is None:
            continue
        values = np.array([[np.nan if x is None else x for x in row]
                           for row in recorded["values"]], float)
        curves = Curves(spec, tuple(recorded["params"]), values)
        m.setdefault(f"{prefix}_final_range", final_range(values))
        m.setdefault(f"{prefix}_phase1_displacement", displacement(values, curves.sign))
        if f"{prefix}_order_hypertrick_best" in m or f"{key}simulated" not in m:
            continue
        sim = simulate(curves, orders=m["orders"], workers=spec.workers,
                       methods=("hypertrick", "none"), seed=parameters.get("sampler_seed", 0))
        row = {r["method"]: r for r in m[f"{key}simulated"]}["hypertrick"]
        again = {r["method"]: r for r in sim["rows"]}["hypertrick"]
        if all(math.isclose(row[k], again[k], rel_tol=1e-12, abs_tol=1e-12)
               for k in ("at_least_random", "best", "random_at_same_compute", "compute")):
            order = sim["per_order"]["hypertrick"]
            m[f"{prefix}_order_hypertrick_best"] = _plain_list(order["best"])
            m[f"{prefix}_order_random_best"] = _plain_list(order["random"])
        else:
            m[f"{prefix}_to_remake"] = ("replaying the recorded curves does not reproduce the "
                                        "recorded shares; re-run -p preset claim (about 2 h 18 "
                                        "min on 2 shared cores)")
    return summary(m)


def describe(m: dict[str, Any]) -> str:
    """The conclusions as Markdown, every number and verdict from ``m`` (decided by
    :func:`summary`)."""
    decided = {c["name"]: said(c) for c in summary(m)["claims"]}
    lines = [
        f"**Early phases on A2C/MinAtar**: Spearman's rho between the first phase's return "
        f"and the final one {m['a2c_spearman_phase1']:.2f} (Kendall "
        f"{m['a2c_kendall_phase1']:.2f}) over {m['configurations']} configurations; "
        f"MPO/Pendulum {m['mpo_spearman_phase1']:.2f} (Kendall {m['mpo_kendall_phase1']:.2f}) "
        f"over {m['mpo_configurations']}. Displacement of each configuration's first-phase "
        f"rank from its final rank: A2C {decided['early_phases_predict']}; MPO "
        f"{decided['early_phases_predict_mpo']}.", "",
        f"**HyperTrick against random search on the same compute "
        f"({decided['as_good_on_less_compute']})**: over {m['orders']} arrival orders "
        f"HyperTrick used {m['hypertrick_compute']:.1f} trials of compute and found a best "
        f"final return of {m['hypertrick_best']:.3f} on average; random search on that "
        f"compute {m['random_best_at_hypertrick_compute']:.3f}; HyperTrick was at least as "
        f"good on {m['hypertrick_at_least_random']:.0%} of the orders.", "",
        "| method | compute (trials) | best (mean) | 10-90% | random search on that compute "
        "| at least random |", "|---|---|---|---|---|---|"]
    for r in m["simulated"]:
        lines.append(f"| {r['method']} | {r['compute']:.1f} | {r['best']:.3f} | "
                     f"{r['best_q10']:.3f}-{r['best_q90']:.3f} | "
                     f"{r['random_at_same_compute']:.3f} | {r['at_least_random']:.0%} |")
    worst = sorted(m["a2c_misleading"], key=lambda r: -r["early_minus_final"])[:3]
    lines += ["", "**Settings that look better after the first phase than they end** "
              "(mean percentile early - final): " + "; ".join(
                  f"{r['parameter']} {r['value']}: {r['early_minus_final']:+.2f} "
                  f"({r['configurations']})" for r in worst) + "."]
    if "live" in m:
        live = m["live"]
        lines += ["", f"**Live sweep** ({decided['simulator_predicts_live']}): "
                  f"HyperTrick best {live['hypertrick_best']:.3f} with "
                  f"{live['hypertrick_compute']:.2f} trials of compute (predicted 5/50/95%: "
                  f"{', '.join(f'{x:.3f}' for x in m['live_predicted_hypertrick_best'])}); "
                  f"random search {live['random_best']:.3f} (predicted "
                  f"{', '.join(f'{x:.3f}' for x in m['live_predicted_random_best'])})."]
    if "mpo_simulated" in m:
        r = {x["method"]: x for x in m["mpo_simulated"]}["hypertrick"]
        lines += ["", f"**The same replay on MPO/Pendulum**: HyperTrick used "
                  f"{r['compute']:.1f} trials of compute, best {r['best']:.1f} against random "
                  f"search's {r['random_at_same_compute']:.1f} on that compute, at least as "
                  f"good on {r['at_least_random']:.0%} of the orders "
                  f"({decided.get('as_good_on_less_compute_mpo', 'not tested')})."]
    if "break_even" in m:
        lines += ["", "**Break-even** (the A2C finals, earlier phases made more or less "
                  "predictive):", "",
                  "| earlier phases | Spearman phase 1 | HyperTrick at least random | "
                  "HyperTrick compute | ASHA at least random |", "|---|---|---|---|---|"]
        lines += [f"| {r['level']} | {r['spearman_phase1']:.2f} | "
                  f"{r['hypertrick_at_least_random']:.0%} | {r['hypertrick_compute']:.1f} | "
                  f"{r['asha_at_least_random']:.0%} |" for r in m["break_even"]]
    lines += ["", "**Rule of thumb.** " + rule_of_thumb(m)]
    return "\n".join(lines)


def curves(m: dict[str, Any], simulated: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What ``record(curves=...)`` stores for the compare view: each workload's Spearman
    correlation against the fraction of training (one number per evaluation, over the
    configurations), each method's share of orders at least random search against the
    first phase's correlation (band: its 95% Wilson interval), and the best found against
    compute for each replayed method (median over the arrival orders, band: the quartiles)."""
    out = {}
    for name in ("a2c", "mpo"):
        rho = m[f"{name}_spearman"]
        out[f"{name}_spearman"] = {"x": (np.arange(1, len(rho) + 1) / len(rho)).tolist(),
                                   "y": rho, "xlabel": "fraction of training",
                                   "ylabel": "Spearman's rho with the final return"}
    if "break_even" in m:
        rows = sorted(m["break_even"], key=lambda r: r["spearman_phase1"])
        for method in ("hypertrick", "asha"):
            out[f"{method}_break_even"] = {
                "x": [r["spearman_phase1"] for r in rows],
                "y": [r[f"{method}_at_least_random"] for r in rows],
                "xlabel": "Spearman's rho, first phase with the final",
                "ylabel": "share of orders at least random search"} | ({
                    "low": [r[f"{method}_at_least_random_ci"][0] for r in rows],
                    "high": [r[f"{method}_at_least_random_ci"][1] for r in rows],
                    "band": f"share of {m['orders']} orders, band 95% Wilson interval"}
                    if all(f"{method}_at_least_random_ci" in r for r in rows) else {})
    for method, best in simulated["best"].items():
        out[f"{method}_best"] = spread_curve(
            simulated["grid"], best, unit="arrival orders", centre="median", spread="quartiles",
            xlabel="compute (whole trials)", ylabel="best final return found")
    return out


def plain(curves: Curves) -> dict[str, Any]:
    """A curve set's configurations and values as plain data (for metrics.json)."""
    return {"params": list(curves.params), "values": np.where(
        np.isnan(curves.values), None, curves.values).tolist()}

