"""The ProxProp reproduction: named presets, the step-size grid, and the claim's verdict.

Claim (Frerix et al. 2018): at their tuned step sizes ProxProp lowers the training loss
faster per epoch than BackProp, and it stays stable at step sizes where BackProp
diverges. Both methods train over the same grid of step sizes and seeds; the tuned step
size of each is the one with the lowest mean final training loss.
"""

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lab.data import load
from lab.train.proxprop import Curves, ProxPropConfig, as_inputs, seconds_per_epoch, train_grid

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
class Comparison:
    """BackProp and ProxProp over one grid: curves of shape (seeds, lrs, epochs + 1)."""

    lrs: np.ndarray
    backprop: Curves
    proxprop: Curves
    backprop_seconds_per_epoch: float
    proxprop_seconds_per_epoch: float


def load_data(dataset: str, arch: str):
    x, y = load(dataset, "train")
    x_val, y_val = load(dataset, "test")
    return as_inputs(x, arch), y, as_inputs(x_val, arch), y_val


def compare(config: ProxPropConfig, data, lrs, seeds: int, *, lr: float,
            backprop_lr: float) -> Comparison:
    """Train both methods over ``lrs`` (plus ``lr`` and ``backprop_lr``) and ``seeds``, and
    time one epoch of each at its own given step size."""
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    lrs = np.array(sorted(set(map(float, lrs)) | {float(lr), float(backprop_lr)}))
    if lrs[0] <= 0:
        raise ValueError(f"step sizes must be positive, got {lrs[0]} in lr/backprop_lr/lr_grid")
    backprop = replace(config, solver="gradient")
    return Comparison(
        lrs=lrs,
        backprop=jax_to_numpy(train_grid(backprop, data, lrs, seeds)),
        proxprop=jax_to_numpy(train_grid(config, data, lrs, seeds)),
        backprop_seconds_per_epoch=seconds_per_epoch(backprop, data, backprop_lr),
        proxprop_seconds_per_epoch=seconds_per_epoch(config, data, lr),
    )


def jax_to_numpy(curves: Curves) -> Curves:
    return Curves(*(np.asarray(c, np.float64) for c in curves))


def diverged(curves: Curves) -> np.ndarray:
    """Per step size: did any seed end with a non-finite loss or above its initial loss?"""
    final, initial = curves.train_loss[..., -1], curves.train_loss[..., 0]
    return np.any(~np.isfinite(final) | (final > initial), axis=0)


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
        "claim_faster_per_epoch": bool(ahead.all()),
        "claim_stable_where_backprop_diverges": bool(len(rescued) > 0),
        "backprop_seconds_per_epoch": result.backprop_seconds_per_epoch,
        "proxprop_seconds_per_epoch": result.proxprop_seconds_per_epoch,
    }
