"""The ProxProp reproduction: named presets, the step-size grid, and the claim's verdict.

Claim (Frerix et al. 2018): at their tuned step sizes ProxProp lowers the training loss
faster per epoch than BackProp, and it stays stable at step sizes where BackProp
diverges. Both methods train over the same grid of step sizes and seeds; the tuned step
size of each is the one with the lowest mean final training loss.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from lab import parallel
from lab.data import DATASETS, load
from lab.train.proxprop import (
    Curves,
    ProxPropConfig,
    as_inputs,
    make_epochs,
    seconds_per_epoch,
    train_grid,
)

# The paper's set-ups (they need CIFAR-10 in the data cache: lab.data.load("cifar10")).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "paper_mlp": dict(dataset="cifar10", arch="mlp", hidden=[4000, 1000, 4000], batch_size=500,
                      optimizer="nesterov", backprop_lr=0.05, lr=1.0, tau=0.05, solver="exact",
                      epochs=50, lr_grid=[0.005, 0.05, 0.5, 1.0, 5.0]),
    "paper_conv": dict(dataset="cifar10", arch="conv", batch_size=500, optimizer="adam",
                       backprop_lr=1e-3, lr=1e-3, tau=1.0, solver="cg3", epochs=50,
                       lr_grid=[1e-4, 1e-3, 1e-2]),
}


def apply_preset(preset: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The notebook's parameters with the preset's values put over them."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return parameters | PRESETS[preset]


@dataclass(frozen=True)
class Setup:
    """Everything one run of the notebook needs, validated."""

    config: ProxPropConfig
    dataset: str
    lr: float
    backprop_lr: float
    lr_grid: tuple[float, ...]
    seeds: int
    devices: int = 1
    """Devices each minibatch is split over (``devices // model_devices`` ways)."""
    model_devices: int = 1
    """How many of them split each wide weight matrix (the ``"model"`` mesh axis)."""

    def mesh(self) -> Mesh | None:
        """The first ``devices`` devices as a ``data x model`` grid (:func:`parallel.mesh`);
        None on one device (no sharding at all), as in the other experiments."""
        return parallel.mesh_or_none(self.devices, self.model_devices)

    @property
    def lrs(self) -> np.ndarray:
        """The grid both methods train over: ``lr_grid`` plus both given step sizes."""
        return np.array(sorted(set(self.lr_grid) | {self.lr, self.backprop_lr}))


def configure(*, preset: str, dataset: str, arch: str, hidden: list[int], solver: str,
              optimizer: str, lr: float, backprop_lr: float, tau: float, epochs: int,
              batch_size: int, seeds: int, lr_grid: list[float], devices: int = 1,
              model_devices: int = 1) -> Setup:
    """The notebook's parameters as a :class:`Setup`; raises ValueError naming a bad one.
    The runner calls this before it starts a kernel (the notebook's metadata names it)."""
    p = apply_preset(preset, dict(dataset=dataset, arch=arch, hidden=hidden, solver=solver,
                                  optimizer=optimizer, lr=lr, backprop_lr=backprop_lr, tau=tau,
                                  epochs=epochs, batch_size=batch_size, lr_grid=lr_grid))
    if p["dataset"] not in DATASETS:
        raise ValueError(f"unknown dataset {p['dataset']!r}; choose one of {', '.join(DATASETS)}")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    step_sizes = [p["lr"], p["backprop_lr"], *p["lr_grid"]]
    if min(step_sizes) <= 0:
        raise ValueError(f"step sizes must be positive: check lr, backprop_lr and lr_grid "
                         f"({min(step_sizes)})")
    config = ProxPropConfig(arch=p["arch"], hidden=tuple(p["hidden"]), solver=p["solver"],
                            tau=p["tau"], optimizer=p["optimizer"], epochs=p["epochs"],
                            batch_size=p["batch_size"])
    parallel.check_devices(devices, model_devices, batch_size=config.batch_size)
    return Setup(config, p["dataset"], float(p["lr"]), float(p["backprop_lr"]),
                 tuple(map(float, p["lr_grid"])), seeds, devices, model_devices)


@dataclass(frozen=True)
class Comparison:
    """BackProp and ProxProp over one grid: curves of shape (seeds, lrs, epochs + 1)."""

    lrs: np.ndarray
    backprop: Curves
    proxprop: Curves
    backprop_seconds_per_epoch: float
    proxprop_seconds_per_epoch: float


def load_data(setup: Setup):
    """Training and validation (the dataset's test split) inputs shaped for the arch."""
    x, y = load(setup.dataset, "train")
    x_val, y_val = load(setup.dataset, "test")
    arch = setup.config.arch
    return as_inputs(x, arch), y, as_inputs(x_val, arch), y_val


def compare(setup: Setup, data) -> Comparison:
    """Train both methods over ``setup.lrs`` and ``setup.seeds``, and time one epoch of
    each at its own given step size, on ``setup.mesh()``."""
    backprop, mesh = replace(setup.config, solver="gradient"), setup.mesh()
    return Comparison(
        lrs=setup.lrs,
        backprop=jax_to_numpy(train_grid(backprop, data, setup.lrs, setup.seeds, mesh=mesh)),
        proxprop=jax_to_numpy(train_grid(setup.config, data, setup.lrs, setup.seeds,
                                         mesh=mesh)),
        backprop_seconds_per_epoch=seconds_per_epoch(backprop, data, setup.backprop_lr,
                                                     mesh=mesh),
        proxprop_seconds_per_epoch=seconds_per_epoch(setup.config, data, setup.lr, mesh=mesh),
    )


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


def tuned_curves(result: Comparison) -> dict[str, tuple[float, Curves]]:
    """Each method's step size with the lowest final training loss and its curves, averaged
    over seeds: ``{"BackProp": (lr, curves), "ProxProp": (lr, curves)}``."""
    out = {}
    for name, curves in (("BackProp", result.backprop), ("ProxProp", result.proxprop)):
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


def verdict(result: Comparison, *, early_epoch: int = 5) -> dict[str, Any]:
    """The claim's numbers, ready for ``record``; see the module docstring."""
    bp_i, pp_i = tuned_index(result.backprop), tuned_index(result.proxprop)
    bp = result.backprop.train_loss[:, bp_i].mean(0)
    pp = result.proxprop.train_loss[:, pp_i].mean(0)
    epochs = len(bp) - 1
    early = min(early_epoch, epochs)
    ahead = pp[1:] < bp[1:]
    bp_div, pp_div = diverged(result.backprop), diverged(result.proxprop)
    rescued = result.lrs[bp_div & ~pp_div]
    return {
        "backprop_tuned_lr": float(result.lrs[bp_i]),
        "proxprop_tuned_lr": float(result.lrs[pp_i]),
        f"backprop_train_loss_epoch{early}": float(bp[early]),
        f"proxprop_train_loss_epoch{early}": float(pp[early]),
        "backprop_final_train_loss": float(bp[-1]),
        "proxprop_final_train_loss": float(pp[-1]),
        "backprop_final_val_accuracy": float(result.backprop.val_accuracy[:, bp_i, -1].mean()),
        "proxprop_final_val_accuracy": float(result.proxprop.val_accuracy[:, pp_i, -1].mean()),
        "epochs_proxprop_lower": int(ahead.sum()),
        "epochs": epochs,
        "backprop_diverged_lrs": result.lrs[bp_div].tolist(),
        "proxprop_diverged_lrs": result.lrs[pp_div].tolist(),
        "lrs_only_backprop_diverges": rescued.tolist(),
        "lrs": result.lrs.tolist(),
        "backprop_final_loss_by_lr": final_losses(result.backprop),
        "proxprop_final_loss_by_lr": final_losses(result.proxprop),
        "claim_faster_per_epoch": bool(ahead.all()),
        "claim_stable_where_backprop_diverges": bool(len(rescued) > 0),
        "backprop_seconds_per_epoch": result.backprop_seconds_per_epoch,
        "proxprop_seconds_per_epoch": result.proxprop_seconds_per_epoch,
    }


def describe(metrics: dict[str, Any], setup: Setup, *, early_epoch: int = 5) -> str:
    """The conclusions, as Markdown, from :func:`verdict`'s numbers."""
    m, e = metrics, min(early_epoch, setup.config.epochs)
    holds = {True: "holds", False: "does not hold"}
    rescued = [round(loss, 4) for lr, loss in zip(m["lrs"], m["proxprop_final_loss_by_lr"],
                                                  strict=True)
               if lr in m["lrs_only_backprop_diverges"]]
    ratio = m["proxprop_seconds_per_epoch"] / m["backprop_seconds_per_epoch"]
    return f"""
**Faster per epoch: {holds[m['claim_faster_per_epoch']]}.** At the tuned step sizes (BackProp
{m['backprop_tuned_lr']:g}, ProxProp {m['proxprop_tuned_lr']:g}, {setup.seeds} seeds) ProxProp's
mean training loss is lower than BackProp's after {m['epochs_proxprop_lower']} of {m['epochs']}
epochs: after epoch {e} {m[f'proxprop_train_loss_epoch{e}']:.3g} against
{m[f'backprop_train_loss_epoch{e}']:.3g}, after the last {m['proxprop_final_train_loss']:.3g}
against {m['backprop_final_train_loss']:.3g}. Validation accuracy at the end: ProxProp
{m['proxprop_final_val_accuracy']:.3f}, BackProp {m['backprop_final_val_accuracy']:.3f}.

**Stable where BackProp diverges: {holds[m['claim_stable_where_backprop_diverges']]}.** BackProp
diverged at step sizes {m['backprop_diverged_lrs']}, ProxProp at {m['proxprop_diverged_lrs']};
only BackProp diverged at {m['lrs_only_backprop_diverges']}, where ProxProp's final training
losses were {rescued}. Caveat: the ProxProp direction is close to tau x gradient where the
curvature is small, so its step sizes live on a scale about 1/tau = {1 / setup.config.tau:g}
times BackProp's; compare the robustness curves with that shift in mind.

**Cost.** One epoch took {m['proxprop_seconds_per_epoch'] * 1e3:.1f} ms with ProxProp
({setup.config.solver}) and {m['backprop_seconds_per_epoch'] * 1e3:.1f} ms with BackProp
({ratio:.2f}x); the top-right panel compares the two per second of compute.
"""
