"""The ProxProp reproduction: named presets, the step-size grid, and the claim's verdict.

Claim (Frerix et al. 2018): at their tuned step sizes ProxProp lowers the training loss
faster per epoch than BackProp, and it stays stable at step sizes where BackProp
diverges. Both methods train over the same grid of step sizes and seeds; the tuned step
size of each is the one with the lowest mean final training loss. ProxProp can train with
several solvers side by side (``solver`` first, then ``more_solvers``), each judged against
the same BackProp runs.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from lab import parallel
from lab.data import DATASETS, load
from lab.runs.claims import Claim, plural, verdict_of
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.train.proxprop import (
    Curves,
    ProxPropConfig,
    as_inputs,
    make_epochs,
    timed_grid,
)

# The paper's set-ups. fashion_*: on Fashion-MNIST (offline from Debian's
# dataset-fashion-mnist), sized to finish in about an hour on a 2-core CPU; paper_*: the
# paper's CIFAR-10 runs (they need CIFAR-10 in the data cache: lab.data.load("cifar10")).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # Measured on the 2-core CPU shared with 3 other jobs (load 5-7), 2026-11-23, per step of
    # batch 500 at these widths: BackProp 0.90 s, exact 3.14 s, cg3 1.68 s (colcg3 1.53 s);
    # full-batch evaluation 0.44 ms per example. A full 60,000-image epoch would cost about
    # 140 s (BackProp) + 410 s (exact) + 230 s (cg3) per seed and step size, 78 min for the
    # grid below, so the CPU preset trains on the first 10,000 images (20 steps per epoch,
    # about 140 s per seed and step size for all three methods, 850 s an epoch for the grid):
    # 4 epochs, about an hour with compilation. On a GPU: -p train_size 60000 -p epochs 10.
    "fashion_mlp": dict(dataset="fashion_mnist", arch="mlp", hidden=[4000, 1000, 4000],
                        batch_size=500, optimizer="nesterov", backprop_lr=0.05, lr=1.0,
                        tau=0.05, solver="exact", more_solvers=["cg3"], train_size=10_000,
                        epochs=4, seeds=3, lr_grid=[0.05, 1.0]),
    # The paper's ConvNet (models.py, ProxPropConvNet: three 5x5 convolutions of 16, 20, 20
    # channels, 'same' padding, ReLU, 2x2 max-pool after the first two; Linear 980 -> 10 on
    # 28x28x1), Adam, tau 1, cg3 and cg10 as in paper_experiments.sh; full training set.
    # Measured cost (2026-11-23): on this 2-core CPU per step of 500 images BackProp 3.97 s,
    # cg3 21.0 s, cg10 19.6 s (at a lower load), evaluation of 70,000 images 21 s: about 90
    # minutes an epoch for one seed and step size, over 200 hours for the preset as set, so
    # it is for a GPU: on one H100 an epoch took 0.13 s, 0.31 s and 0.64 s (about 5 minutes
    # for the preset with compilation).
    "fashion_conv": dict(dataset="fashion_mnist", arch="conv", batch_size=500, optimizer="adam",
                         backprop_lr=1e-3, lr=1e-3, tau=1.0, solver="cg3", more_solvers=["cg10"],
                         train_size=0, epochs=20, seeds=3, lr_grid=[1e-4, 1e-3, 1e-2]),
    "paper_mlp": dict(dataset="cifar10", arch="mlp", hidden=[4000, 1000, 4000], batch_size=500,
                      optimizer="nesterov", backprop_lr=0.05, lr=1.0, tau=0.05, solver="exact",
                      epochs=50, lr_grid=[0.005, 0.05, 0.5, 1.0, 5.0]),
    "paper_conv": dict(dataset="cifar10", arch="conv", batch_size=500, optimizer="adam",
                       backprop_lr=1e-3, lr=1e-3, tau=1.0, solver="cg3", epochs=50,
                       lr_grid=[1e-4, 1e-3, 1e-2]),
}
PRESETS["gpu"] = PRESETS["fashion_conv"]  # `python -m lab run --all --preset gpu` on a lent GPU


@dataclass(frozen=True)
class Setup:
    """Everything one run of the notebook needs, validated."""

    config: ProxPropConfig
    dataset: str
    lr: float
    backprop_lr: float
    lr_grid: tuple[float, ...]
    seeds: int
    more_solvers: tuple[str, ...] = ()
    """ProxProp solvers trained beside ``config.solver`` over the same grid and seeds."""
    train_size: int = 0
    """Training examples used, the first ones of the training split (as the reference code's
    ``--num_training_samples``); 0 for all of them."""
    devices: int = 1
    """Devices each minibatch is split over (``devices // model_devices`` ways)."""
    model_devices: int = 1
    """How many of them split each wide weight matrix (the ``"model"`` mesh axis)."""

    def mesh(self) -> Mesh | None:
        """The first ``devices`` devices as a ``data x model`` grid (:func:`parallel.mesh`);
        None on one device (no sharding at all), as in the other experiments."""
        return parallel.mesh_or_none(self.devices, self.model_devices)

    @property
    def solvers(self) -> tuple[str, ...]:
        """Every ProxProp solver compared with BackProp, ``config.solver`` first."""
        return (self.config.solver, *self.more_solvers)

    @property
    def lrs(self) -> np.ndarray:
        """The grid both methods train over: ``lr_grid`` plus both given step sizes."""
        return np.array(sorted(set(self.lr_grid) | {self.lr, self.backprop_lr}))


def configure(*, preset: str, dataset: str, arch: str, hidden: list[int], solver: str,
              optimizer: str, lr: float, backprop_lr: float, tau: float, epochs: int,
              batch_size: int, seeds: int, lr_grid: list[float],
              more_solvers: list[str] = (), train_size: int = 0, devices: int = 1,
              model_devices: int = 1) -> Setup:
    """The notebook's parameters as a :class:`Setup`; raises ValueError naming a bad one.
    The runner calls this before it starts a kernel (the notebook's metadata names it)."""
    p = with_preset(dict(preset=preset, dataset=dataset, arch=arch, hidden=hidden,
                         solver=solver, optimizer=optimizer, lr=lr, backprop_lr=backprop_lr,
                         tau=tau, epochs=epochs, batch_size=batch_size, lr_grid=lr_grid,
                         more_solvers=more_solvers, train_size=train_size, seeds=seeds,
                         devices=devices, model_devices=model_devices), PRESETS)
    if p["dataset"] not in DATASETS:
        raise ValueError(f"unknown dataset {p['dataset']!r}; choose one of {', '.join(DATASETS)}")
    seeds = p["seeds"]
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    step_sizes = [p["lr"], p["backprop_lr"], *p["lr_grid"]]
    if min(step_sizes) <= 0:
        raise ValueError(f"step sizes must be positive: check lr, backprop_lr and lr_grid "
                         f"({min(step_sizes)})")
    config = ProxPropConfig(arch=p["arch"], hidden=tuple(p["hidden"]), solver=p["solver"],
                            tau=p["tau"], optimizer=p["optimizer"], epochs=p["epochs"],
                            batch_size=p["batch_size"])
    if not 0 <= p["train_size"] or 0 < p["train_size"] < config.batch_size:
        raise ValueError(f"train_size must be 0 (all) or at least batch_size "
                         f"{config.batch_size}, got {p['train_size']}")
    more = tuple(p["more_solvers"])
    for solver in more:
        if solver == "gradient" or solver == config.solver:
            raise ValueError(f"more_solvers: {solver!r} is BackProp or `solver` itself; list "
                             "other ProxProp solvers")
        replace(config, solver=solver)  # validates the solver for the arch
    parallel.check_devices(devices, model_devices, batch_size=config.batch_size)
    return Setup(config, p["dataset"], float(p["lr"]), float(p["backprop_lr"]),
                 tuple(map(float, p["lr_grid"])), seeds, more, int(p["train_size"]), devices,
                 model_devices)


@dataclass(frozen=True)
class Comparison:
    """BackProp and ProxProp over one grid: curves of shape (seeds, lrs, epochs + 1)."""

    lrs: np.ndarray
    backprop: Curves
    proxprop: dict[str, Curves]
    """Per ProxProp solver, the headline one (``setup.config.solver``) first."""
    seconds_per_epoch: dict[str, float]
    """Wall-clock seconds per epoch of ``"BackProp"`` and of each solver's runs."""

    @property
    def solver(self) -> str:
        """The headline ProxProp solver."""
        return next(iter(self.proxprop))


def load_data(setup: Setup):
    """Training (the first ``setup.train_size`` examples, or all) and validation (the
    dataset's test split) inputs shaped for the arch."""
    x, y = load(setup.dataset, "train")
    if setup.train_size:
        x, y = x[: setup.train_size], y[: setup.train_size]
    x_val, y_val = load(setup.dataset, "test")
    arch = setup.config.arch
    return as_inputs(x, arch), y, as_inputs(x_val, arch), y_val


def compare(setup: Setup, data) -> Comparison:
    """Train BackProp and every solver of ``setup.solvers`` over ``setup.lrs`` and
    ``setup.seeds`` on ``setup.mesh()``; each one's seconds per epoch are those of its own
    grid run, compiled (:func:`lab.train.proxprop.timed_grid`)."""
    mesh = setup.mesh()
    curves, seconds = {}, {}
    for name, solver in (("BackProp", "gradient"), *((s, s) for s in setup.solvers)):
        config = replace(setup.config, solver=solver)
        grid, seconds[name] = timed_grid(config, data, setup.lrs, setup.seeds, mesh=mesh)
        curves[name] = jax_to_numpy(grid)
    backprop = curves.pop("BackProp")
    return Comparison(setup.lrs, backprop, curves, seconds)


def side_by_side(setup: Setup, data, seed: int = 0,
                 callback: Callable[[int, dict[str, Curves]], bool | None] | None = None
                 ) -> dict[str, tuple[Any, Curves]]:
    """BackProp (at ``backprop_lr``) and ProxProp (at ``lr``) trained from the same seed, one
    epoch of each in turn, with ``callback(epoch, {"BackProp": curves, "ProxProp": curves})``
    after every epoch (the curves so far, shape (epoch + 1,)); it stops both when it returns
    False. Returns ``{name: (model, curves)}``. Each method's run is
    ``make_train(config)(fold_in(key(0), seed), lr)``, one epoch at a time."""
    methods = {"BackProp": (replace(setup.config, solver="gradient"), setup.backprop_lr),
               "ProxProp": (setup.config, setup.lr)}
    runs = {}
    for name, (config, lr) in methods.items():
        epochs = make_epochs(config, *data)
        init_key, data_key = jax.random.split(jax.random.fold_in(jax.random.key(0), seed))
        state, first = jax.jit(epochs.init)(init_key, lr)
        runs[name] = dict(epochs=epochs, step=jax.jit(epochs.epoch), state=state, lr=lr,
                          keys=jax.random.split(data_key, config.epochs), curves=[first])

    def so_far() -> dict[str, Curves]:
        return {name: Curves(*np.asarray(run["curves"], np.float64).T)
                for name, run in runs.items()}

    for epoch in range(setup.config.epochs):
        for run in runs.values():
            run["state"], curves = run["step"](run["state"], run["lr"], run["keys"][epoch])
            run["curves"].append(curves)
        if callback is not None and callback(epoch + 1, so_far()) is False:
            break
    curves = so_far()
    return {name: (run["epochs"].model(run["state"]), curves[name])
            for name, run in runs.items()}


def method_name(solver: str, result: Comparison) -> str:
    """"ProxProp" for the headline solver, "ProxProp (cg3)" for the others."""
    return "ProxProp" if solver == result.solver else f"ProxProp ({solver})"


def methods(result: Comparison) -> dict[str, tuple[Curves, float]]:
    """``{"BackProp": (curves, seconds per epoch), "ProxProp": ..., "ProxProp (cg3)": ...}``,
    BackProp first, then the headline solver, then the others."""
    out = {"BackProp": (result.backprop, result.seconds_per_epoch["BackProp"])}
    for solver, curves in result.proxprop.items():
        out[method_name(solver, result)] = (curves, result.seconds_per_epoch[solver])
    return out


def tuned_curves(result: Comparison) -> dict[str, tuple[float, Curves]]:
    """Each method's step size with the lowest final training loss and its curves, averaged
    over seeds: ``{"BackProp": (lr, curves), "ProxProp": (lr, curves), ...}`` (names of
    :func:`methods`)."""
    out = {}
    for name, (curves, _) in methods(result).items():
        i = tuned_index(curves)
        out[name] = (float(result.lrs[i]), Curves(*(c[:, i].mean(0) for c in curves)))
    return out


def curves(result: Comparison) -> dict[str, dict[str, Any]]:
    """The tuned runs' mean curves against epochs, in the form ``record(curves=...)`` stores
    for the compare view (``lab.widgets.compare``)."""
    out = {}
    for name, (_, c) in tuned_curves(result).items():
        epochs = list(range(len(c.train_loss)))
        for label, values, ylabel in (("training loss", c.train_loss, "training loss"),
                                      ("validation accuracy", c.val_accuracy,
                                       "validation accuracy")):
            out[f"{name} {label} (tuned lr)"] = {
                "x": epochs, "y": [float(v) for v in values], "xlabel": "epoch",
                "ylabel": ylabel}
    return out


def jax_to_numpy(curves: Curves) -> Curves:
    return Curves(*(np.asarray(c, np.float64) for c in curves))


def diverged(curves: Curves) -> np.ndarray:
    """Per step size: did any seed end with a non-finite loss or above its initial loss?"""
    final, initial = curves.train_loss[..., -1], curves.train_loss[..., 0]
    return np.any(~np.isfinite(final) | (final > initial), axis=0)


def final_losses(curves: Curves) -> list[float]:
    """Mean final training loss per step size (NaN where a seed did not stay finite)."""
    return [float(v) for v in curves.train_loss[..., -1].mean(0)]


def tuned_index(curves: Curves) -> int:
    """The step size with the lowest mean final training loss (diverged ones excluded)."""
    final = np.where(diverged(curves), np.inf, curves.train_loss[..., -1].mean(0))
    return int(np.argmin(final))


def against_backprop(lrs: np.ndarray, backprop: Curves, proxprop: Curves, *,
                     early_epoch: int = 5) -> dict[str, Any]:
    """One ProxProp solver's claim numbers against BackProp over the same grid."""
    bp_i, pp_i = tuned_index(backprop), tuned_index(proxprop)
    bp = backprop.train_loss[:, bp_i].mean(0)
    pp = proxprop.train_loss[:, pp_i].mean(0)
    early = min(early_epoch, len(bp) - 1)
    ahead = pp[1:] < bp[1:]
    bp_div, pp_div = diverged(backprop), diverged(proxprop)
    rescued = lrs[bp_div & ~pp_div]
    return {
        "backprop_tuned_lr": float(lrs[bp_i]),
        "proxprop_tuned_lr": float(lrs[pp_i]),
        f"backprop_train_loss_epoch{early}": float(bp[early]),
        f"proxprop_train_loss_epoch{early}": float(pp[early]),
        "backprop_final_train_loss": float(bp[-1]),
        "proxprop_final_train_loss": float(pp[-1]),
        "backprop_final_val_accuracy": float(backprop.val_accuracy[:, bp_i, -1].mean()),
        "proxprop_final_val_accuracy": float(proxprop.val_accuracy[:, pp_i, -1].mean()),
        "epochs_proxprop_lower": int(ahead.sum()),
        "epochs": len(bp) - 1,
        "backprop_diverged_lrs": lrs[bp_div].tolist(),
        "proxprop_diverged_lrs": lrs[pp_div].tolist(),
        "lrs_only_backprop_diverges": rescued.tolist(),
        "lrs": lrs.tolist(),
        "backprop_final_loss_by_lr": final_losses(backprop),
        "proxprop_final_loss_by_lr": final_losses(proxprop),
        "claim_faster_per_epoch": bool(ahead.all()),
        # None: not tested, since no step size of the grid made BackProp diverge
        "claim_stable_where_backprop_diverges": bool(len(rescued)) if bp_div.any() else None,
    }


def verdict(result: Comparison, *, early_epoch: int = 5) -> dict[str, Any]:
    """The claim's numbers, ready for ``record``; see the module docstring. The top-level
    keys are the headline solver's; ``by_solver`` holds every solver's claim numbers and
    ``seconds_per_epoch_by_solver`` their timings (every timing key names seconds, so runs
    compare without them)."""
    by_solver = {solver: against_backprop(result.lrs, result.backprop, curves,
                                          early_epoch=early_epoch)
                 for solver, curves in result.proxprop.items()}
    return by_solver[result.solver] | {
        "backprop_seconds_per_epoch": result.seconds_per_epoch["BackProp"],
        "proxprop_seconds_per_epoch": result.seconds_per_epoch[result.solver],
        "seconds_per_epoch_by_solver": {s: result.seconds_per_epoch[s] for s in by_solver},
        "solvers": list(result.proxprop),
        "by_solver": by_solver,
    }


PAPER = "Frerix, Möllenhoff, Moeller & Cremers, Proximal Backpropagation (ICLR 2018)"
PAPER_SETTING = ("CIFAR-10: an MLP 3072-4000-1000-4000-10 (Nesterov, batch 500) and a conv "
                 "net (Adam), 50 epochs")


def summary(metrics: dict[str, Any], setup: Setup, *, early_epoch: int = 5) -> dict[str, Any]:
    """The claims, study and headline of :func:`verdict`'s numbers for ``record`` (see
    ``lab.runs.claims``): both claims for every solver that trained."""
    e, c = min(early_epoch, setup.config.epochs), setup.config
    net = f"MLP {'-'.join(map(str, c.hidden))}" if c.arch == "mlp" else "conv net"
    data = setup.dataset + (f" (first {setup.train_size:,})" if setup.train_size else "")
    claims = []
    for solver in metrics.get("solvers", [c.solver]):
        m = metrics["by_solver"][solver] if "by_solver" in metrics else metrics
        tag = "" if solver == c.solver else f"_{solver}"
        claims += [
            Claim(f"faster_per_epoch{tag}",
                  f"ProxProp ({solver}) lowers the training loss faster per epoch than "
                  "BackProp, each at its tuned step size",
                  verdict_of(m["claim_faster_per_epoch"]),
                  {"epochs with ProxProp lower": f"{m['epochs_proxprop_lower']} of {m['epochs']}",
                   f"loss after epoch {e}: ProxProp": m[f"proxprop_train_loss_epoch{e}"],
                   f"loss after epoch {e}: BackProp": m[f"backprop_train_loss_epoch{e}"],
                   "final loss: ProxProp": m["proxprop_final_train_loss"],
                   "final loss: BackProp": m["backprop_final_train_loss"]}),
            Claim(f"stable_where_backprop_diverges{tag}",
                  f"ProxProp ({solver}) trains at step sizes where BackProp diverges",
                  verdict_of(m["claim_stable_where_backprop_diverges"]),
                  {"BackProp diverged at": str(m["backprop_diverged_lrs"]),
                   "ProxProp diverged at": str(m["proxprop_diverged_lrs"]),
                   "only BackProp at": str(m["lrs_only_backprop_diverges"])})]
    return claims_summary(
        paper=PAPER, paper_setting=PAPER_SETTING, claims=claims,
        measured=f"{data}, {net}, {plural(c.epochs, 'epoch')}, {plural(setup.seeds, 'seed')}, "
                 f"{plural(len(metrics.get('lrs', setup.lr_grid)), 'step size')}",
        headline=["proxprop_final_train_loss", "backprop_final_train_loss",
                  "proxprop_final_val_accuracy", "backprop_final_val_accuracy",
                  "proxprop_seconds_per_epoch", "backprop_seconds_per_epoch"])


def describe(metrics: dict[str, Any], setup: Setup, *, early_epoch: int = 5) -> str:
    """The conclusions, as Markdown, from :func:`verdict`'s numbers."""
    m, e = metrics, min(early_epoch, setup.config.epochs)
    holds = {True: "holds", False: "does not hold",
             None: "not tested (BackProp diverged at no step size of the grid: widen lr_grid)"}
    rescued = [round(loss, 4) for lr, loss in zip(m["lrs"], m["proxprop_final_loss_by_lr"],
                                                  strict=True)
               if lr in m["lrs_only_backprop_diverges"]]
    text = f"""
**Faster per epoch: {holds[m['claim_faster_per_epoch']]}.** At the tuned step sizes (BackProp
{m['backprop_tuned_lr']:g}, ProxProp ({setup.config.solver}) {m['proxprop_tuned_lr']:g},
{setup.seeds} seeds) ProxProp's mean training loss is lower than BackProp's after
{m['epochs_proxprop_lower']} of {m['epochs']} epochs: after epoch {e}
{m[f'proxprop_train_loss_epoch{e}']:.3g} against {m[f'backprop_train_loss_epoch{e}']:.3g},
after the last {m['proxprop_final_train_loss']:.3g} against
{m['backprop_final_train_loss']:.3g}. Validation accuracy at the end: ProxProp
{m['proxprop_final_val_accuracy']:.3f}, BackProp {m['backprop_final_val_accuracy']:.3f}.

**Stable where BackProp diverges: {holds[m['claim_stable_where_backprop_diverges']]}.** BackProp
diverged at step sizes {m['backprop_diverged_lrs']}, ProxProp at {m['proxprop_diverged_lrs']};
only BackProp diverged at {m['lrs_only_backprop_diverges']}, where ProxProp's final training
losses were {rescued}. Caveat: the ProxProp direction is close to tau x gradient where the
curvature is small, so its step sizes live on a scale about 1/tau = {1 / setup.config.tau:g}
times BackProp's; compare the robustness curves with that shift in mind.
"""
    for solver in m.get("solvers", [setup.config.solver])[1:]:
        o = m["by_solver"][solver]
        text += f"""
**ProxProp with {solver}**, against the same BackProp runs: tuned step size
{o['proxprop_tuned_lr']:g}, lower than BackProp after {o['epochs_proxprop_lower']} of
{o['epochs']} epochs (faster per epoch: {holds[o['claim_faster_per_epoch']]}); final training
loss {o['proxprop_final_train_loss']:.3g}, validation accuracy
{o['proxprop_final_val_accuracy']:.3f}; diverged at {o['proxprop_diverged_lrs']}, only BackProp
at {o['lrs_only_backprop_diverges']} (stable where BackProp diverges:
{holds[o['claim_stable_where_backprop_diverges']]}).
"""
    seconds = m.get("seconds_per_epoch_by_solver",
                    {setup.config.solver: m["proxprop_seconds_per_epoch"]})
    costs = ", ".join(f"{s * 1e3:.1f} ms with ProxProp ({solver}, "
                      f"{s / m['backprop_seconds_per_epoch']:.2f}x)"
                      for solver, s in seconds.items())
    return text + f"""
**Cost.** One epoch took {m['backprop_seconds_per_epoch'] * 1e3:.1f} ms with BackProp,
{costs} (each the mean over its grid run, compiled); the top-right panel compares them per
second of compute.
"""
