"""Causal model selection's panel: draw a graph, pick a shift, see which models each rule
chooses.

    panel = causal_selection_panel(params, trial)   # the notebook's parameters and a trial
    panel.show()

Run draws a random DAG of ``nodes`` nodes with the chosen mechanisms (the trial's seed is
``seed``), trains the candidates and scores them (``lab.experiments.causal_selection.trial``).
Left: the graph, the target in orange and the shifted input (shift ``one``) in red, the
impostor's edges dashed. Right: every candidate's validation error against its error on the
shifted domain, with the candidates each rule selects marked; the legend gives each rule's
mean OOD error. It opens on the notebook's last trial.
"""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab.experiments import causal_selection as experiment
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("nodes", int, 2, 10),
    Control("mechanism", str, options=experiment.MECHANISMS),
    Control("shift", str, options=experiment.SHIFTS),
    Control("mode", str, options=experiment.MODES, description="causal score"),
    Control("seed", int, 0, 999),
    Control("candidates", int, 2, 400),
)
MARKERS = {"validation": ("s", "C0"), "causal": ("o", "C1"), "impostor": ("^", "C7"),
           "oracle": ("*", "C2")}


def draw_graph(ax, names, edges, impostor, target, shifted=None) -> None:
    """Nodes on a circle, ``edges`` solid and ``impostor``'s dashed."""
    d = len(names)
    angle = np.pi / 2 - 2 * np.pi * np.arange(d) / d
    xy = np.stack([np.cos(angle), np.sin(angle)], 1)
    for matrix, style, colour in ((impostor, "--", "0.7"), (edges, "-", "k")):
        for i, j in zip(*np.nonzero(np.asarray(matrix)), strict=True):
            ax.annotate("", xy=xy[j], xytext=xy[i],
                        arrowprops={"arrowstyle": "-|>", "ls": style, "color": colour,
                                    "shrinkA": 12, "shrinkB": 12, "lw": 1.2})
    for i, name in enumerate(names):
        colour = "C1" if name == target else ("C3" if name == shifted else "white")
        ax.scatter(*xy[i], s=520, color=colour, edgecolor="k", zorder=3)
        ax.text(*xy[i], name, ha="center", va="center", fontsize=7, zorder=4)
    ax.set(xlim=(-1.35, 1.35), ylim=(-1.35, 1.35), aspect="equal", xticks=[], yticks=[])


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_graph, ax_errors = figure.subplots(1, 2, gridspec_kw={"width_ratios": [2, 3]})
    trial, shift, mode = data["trial"], data["shift"], data["mode"]
    shifted = trial.get("shifted_input") if shift == "one" else None
    draw_graph(ax_graph, trial["names"], trial["edges"], trial["impostor_edges"],
               trial["target"], shifted)
    ax_graph.set_title(data["title"], fontsize=8)
    if shift not in trial["ood"]:
        return
    validation, ood = trial["validation"], trial["ood"][shift]
    ax_errors.scatter(validation, ood, s=10, color="0.75", label="every candidate")
    results = trial["results"][shift]
    for name, (marker, colour) in MARKERS.items():
        rule = name if name in ("validation", "oracle") else f"{name}_{mode}"
        if rule not in results:
            continue
        chosen = results[rule]["chosen"]
        ax_errors.scatter(validation[chosen], ood[chosen], marker=marker, s=40,
                          facecolor="none", edgecolor=colour,
                          label=f"{name}: {results[rule]['ood']:.3g}")
    ax_errors.set(xlabel="validation MSE", ylabel=f"MSE under shift '{shift}'", yscale="log",
                  title=f"top {len(results['validation']['chosen'])} per rule ({mode} score)")
    ax_errors.legend(fontsize=7)
    figure.tight_layout()


def causal_selection_panel(params: dict[str, Any], trial: dict[str, Any] | None = None) -> Panel:
    """A panel over the notebook's ``params``; it opens on ``trial`` (a synthetic one) if
    given."""
    setup = experiment.configure(**params)
    values = {"nodes": trial["nodes"] if trial else setup.nodes[0],
              "mechanism": trial["mechanism"] if trial else setup.mechanisms[0],
              "shift": setup.shifts[-1], "mode": setup.modes[-1],
              "seed": trial["repeat"] if trial else 0, "candidates": setup.candidates}
    controls = Controls(CONTROLS, values)

    def setup_of(values):
        return experiment.configure(**(params | {
            "nodes": [values["nodes"]], "mechanisms": [values["mechanism"]],
            "candidates": values["candidates"],
            "shifts": sorted({values["shift"], *setup.shifts}, key=experiment.SHIFTS.index),
            "modes": sorted({values["mode"], *setup.modes}, key=experiment.MODES.index)}))

    def title(values, t):
        return (f"{values['nodes']} nodes, {values['mechanism']}, seed {values['seed']}: "
                f"target {t['target']}")

    def run(values, report):
        s = setup_of(values)
        t = experiment.trial(s, values["nodes"], values["mechanism"], values["seed"])
        report(1.0, {"trial": t, "shift": values["shift"], "mode": values["mode"],
                     "title": title(values, t)})
        return t

    panel = Panel("Causal model selection, live", controls, run, draw, validate=setup_of,
                  figsize=(10.0, 3.8), labels=("validation MSE", "MSE under shift"))
    if trial is not None:
        panel.set_result({"trial": trial, "shift": values["shift"], "mode": values["mode"],
                          "title": title(values, trial)}, trial)
    return panel
