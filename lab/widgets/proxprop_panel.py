"""The ProxProp panel: train BackProp and ProxProp side by side, live, one epoch at a time.

    panel = proxprop_panel(params, result)   # the notebook's parameters and its comparison
    panel.show()

Both methods train from the same seed on the notebook's data set and architecture, with the
controls' solver, tau, optimizer, step sizes (``backprop_lr`` for BackProp, ``lr`` for
ProxProp), epochs and batch size (``lab.experiments.proxprop.side_by_side``). The figure
shows BackProp's and ProxProp's losses in two panels side by side, each beside the notebook's
runs at its tuned step size (dotted: their mean over seeds, with their range), and both
validation accuracies in a third.
``panel.result`` holds ``{name: (model, curves)}`` afterwards.
"""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab.experiments import proxprop as experiment
from lab.runs.params import with_preset
from lab.train.proxprop import ARCHS, OPTIMIZERS
from lab.widgets.bands import mean_and_range
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

SOLVERS = experiment.SOLVERS
"""ProxProp solvers offered: those whose claims the experiment declares (``configure``
refuses others)."""
CONTROLS = (
    Control("arch", str, options=ARCHS),
    Control("solver", str, options=SOLVERS),
    Control("tau", float, 1e-4, 1e2, log=True, description="tau (proximal step)"),
    Control("optimizer", str, options=OPTIMIZERS),
    Control("lr", float, 1e-5, 1e2, log=True, description="lr (ProxProp)"),
    Control("backprop_lr", float, 1e-5, 1e2, log=True, description="lr (BackProp)"),
    Control("epochs", int, 1, 500),
    Control("batch_size", int, 1, 10_000),
    Control("seed", int, 0, 99),
)
COLORS = {"BackProp": "C0", "ProxProp": "C1"}


def draw(figure: Figure, data: dict[str, Any]) -> None:
    """BackProp's and ProxProp's training (solid) and validation (dashed) losses side by side,
    each over the notebook's tuned runs (dotted, one row per seed: their mean and range);
    both validation accuracies on the right."""
    live, earlier = data["live"], data.get("earlier", {})
    axes = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1]})
    axes[0].sharey(axes[1])
    for ax, name in zip(axes[:2], COLORS, strict=True):
        color = COLORS[name]
        if name in earlier:
            lr, c = earlier[name]
            mean_and_range(ax, np.arange(c.train_loss.shape[1]), c.train_loss, color="gray",
                           ls=":", label=f"notebook (lr {lr:g})")
        if name in live:
            c = live[name]
            ax.plot(c.train_loss, color=color, label="training")
            ax.plot(c.val_loss, color=color, ls="--", label="validation")
        ax.set(title=name, xlabel="epoch", yscale="log")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("cross-entropy")
    for name, c in live.items():
        axes[2].plot(c.val_accuracy, color=COLORS[name], label=name)
    for name, (_, c) in earlier.items():
        mean_and_range(axes[2], np.arange(c.val_accuracy.shape[1]), c.val_accuracy,
                       color=COLORS[name], ls=":", label=f"{name} (notebook)")
    axes[2].set(title="validation accuracy", xlabel="epoch")
    if axes[2].lines:
        axes[2].legend(fontsize=7)
    figure.tight_layout()


def proxprop_panel(params: dict[str, Any], result: "experiment.Comparison | None" = None
                   ) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments) that shows
    the notebook's ``result`` (its tuned runs) until a new run is made."""
    params = with_preset(params, experiment.PRESETS) | {"preset": "default",
                                                                   "more_solvers": []}
    earlier = {} if result is None else {  # BackProp's and the headline solver's, per seed
        name: runs for name, runs in experiment.tuned_seed_curves(result).items()
        if name in COLORS}
    controls = Controls(CONTROLS, {c.name: params.get(c.name, 0) for c in CONTROLS})

    def setup_of(values):
        values = {k: v for k, v in values.items() if k != "seed"}
        return experiment.configure(**(params | values))

    def train(values, report):
        setup = setup_of(values)
        data = experiment.load_data(setup)
        epochs = setup.config.epochs

        def callback(epoch, curves):
            return report(epoch / epochs, {"live": curves, "earlier": earlier})

        return experiment.side_by_side(setup, data, values["seed"], callback)

    panel = Panel("ProxProp and BackProp, side by side", controls, train, draw,
                  validate=setup_of, figsize=(12.0, 3.6), labels=("epoch", "cross-entropy"))
    if earlier:
        panel.set_result({"live": {}, "earlier": earlier})
    return panel
