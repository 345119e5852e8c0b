"""The early-termination panel: replay sweeps from recorded curves, live.

    panel = early_termination_panel(curves, simulated=simulated)   # Curves, the replays
    panel.show()

Run replays ``orders`` random arrival orders of ``trials`` configurations with the chosen
method (HyperTrick, ASHA, Hyperband, the median rule, synchronous halving) and with random
search on the same orders (``lab.sweeps.simulator``), no training; the figure shows the best
final metric found against compute (median and 10-90% band of the orders so far) for both.
Pause holds the replays between two orders; Stop ends them. ``panel.result`` holds the
``(orders, grid)`` bests of both. Given the notebook's replays
(``lab.experiments.early_termination.simulate``) it opens on HyperTrick's and random
search's.
"""

import warnings
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab.sweeps.simulator import METHODS, Curves, best_at, replay
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax = figure.subplots()
    grid = data["grid"]
    for (name, best), color in zip(data["best"].items(), ("C0", "C1"), strict=True):
        b = np.array(best)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no trial finished yet: NaN
            lo, mid, hi = np.nanquantile(b, [0.1, 0.5, 0.9], axis=0)
        ax.plot(grid, mid, color=color,
                label=f"{name}: median of {len(b)} orders, band 10th-90th percentile")
        ax.fill_between(grid, lo, hi, color=color, alpha=0.2)
    ax.set(xlabel="compute (whole trials)", ylabel="best final metric found")
    ax.legend(fontsize=7)
    figure.tight_layout()


def early_termination_panel(curves: Curves, *, workers: int = 2, orders: int = 100,
                            simulated: dict[str, Any] | None = None) -> Panel:
    """A panel replaying sweeps over ``curves``; it opens on ``simulated`` (the notebook's
    replays of the same curves), if given."""
    n = len(curves.values)
    controls = Controls((
        Control("method", str, options=tuple(m for m in METHODS if m != "none")),
        Control("workers", int, 1, 64),
        Control("trials", int, 1, n),
        Control("survival", float, 0.05, 1.0),
        Control("orders", int, 1, 10_000),
    ), {"method": "hypertrick", "workers": workers, "trials": n,
        "survival": curves.spec.survival, "orders": orders})

    def train(values, report):
        grid = np.linspace(0, values["trials"], 4 * values["trials"] + 1)[1:]
        best: dict[str, list] = {values["method"]: [], "none": []}
        for k in range(values["orders"]):
            order = np.random.default_rng([0, k]).permutation(n)[:values["trials"]]
            for method in best:
                r = replay(curves, method, order, workers=values["workers"],
                           survival=values["survival"], rng=np.random.default_rng([0, k, 1]))
                best[method].append(best_at(r.trace, grid))
            if report((k + 1) / values["orders"], {"grid": grid, "best": best}) is False:
                break
        return {m: np.array(b) for m, b in best.items()}

    panel = Panel("Sweeps replayed from recorded curves", controls, train, draw,
                  figsize=(7.0, 3.6), labels=("compute (whole trials)", "best final metric found"))
    shown = ("hypertrick", "none")
    if simulated is not None and set(shown) <= set(simulated["best"]):
        best = {m: simulated["best"][m] for m in shown}
        panel.set_result({"grid": simulated["grid"], "best": best}, best)
    return panel
