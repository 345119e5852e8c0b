"""Compare finished runs: overlay the curves that runs recorded, picked from a list.

A notebook records curves with ``lab.experiments.record(curves={name: {"x": [...], "y":
[...], "xlabel": ..., "ylabel": ...}})``; they land in the run's ``metrics.json``. The view
lists the runs under ``reports/runs`` that have curves (newest first, one notebook or all),
and overlays the chosen curve of every selected run. A curve made from per-seed (per-trial)
numbers (``lab.runs.records.spread_curve``) also holds ``low``/``high`` and says what the
line and band are (``band``: "mean of 3 seeds, band min-max"): the view shades the band and
puts the words in the run's legend entry; the legend sits below the axes, off the data.

    CompareView(notebook="04_policy_improvement.ipynb").show()
"""

import os
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lab.runs.records import read_metrics, run_dir
from lab.runs.report import load_runs
from lab.widgets.panel import empty_png, figure_png, is_headless


def default_reports_dir() -> Path:
    """``reports/`` of this project: the runner's run folder's grandparent, else the first
    ``reports`` folder with runs in the working directory or above it."""
    if (folder := run_dir()) is not None:
        return folder.parent.parent
    here = Path.cwd().resolve()
    for parent in (here, *here.parents):
        if (parent / "reports" / "runs").is_dir():
            return parent / "reports"
    return Path("reports")


def runs_with_curves(reports: Path, notebook: str | None = None) -> list[dict[str, Any]]:
    """Runs (newest first) whose metrics hold curves, each with its ``curves`` and a label."""
    found = []
    this = run_dir()  # the run this view is drawn in, if any: its record still says running
    for run in load_runs(Path(reports)):
        if notebook is not None and run.get("notebook") != notebook:
            continue
        folder = Path(reports) / "runs" / Path(run.get("run_dir", "")).name
        curves = read_metrics(folder).get("curves")
        if not curves:
            continue
        overrides = ", ".join(f"{k}={v}" for k, v in (run.get("overrides") or {}).items())
        run["this_run"] = this is not None and folder.resolve() == this.resolve()
        status = "this run" if run["this_run"] else run.get("status")
        run["label"] = (f"{run.get('started', '')[:16].replace('T', ' ')} "
                        f"{run.get('notebook', '')} [{status}] {overrides}").strip()
        run["curves"] = curves
        found.append(run)
    return found


def curve_label(run: dict[str, Any], c: dict[str, Any]) -> str:
    """The run's label, and what its line and band are where the curve says ("mean of 3
    seeds, band min-max")."""
    return f"{run['label']}: {c['band']}" if c.get("band") else run["label"]


def draw_overlay(figure: Figure, runs: list[dict[str, Any]], curve: str) -> None:
    """The selected runs' ``curve`` on one axes of ``figure`` (made with
    ``layout="constrained"``), each run's band shaded where it recorded one."""
    ax = figure.add_subplot()
    for i, run in enumerate(runs):
        c = run["curves"].get(curve)
        if c is None:
            continue
        colour = f"C{i % 10}"
        if not ax.get_xlabel() and not ax.get_ylabel():  # the first run that names them
            ax.set(xlabel=c.get("xlabel", ""), ylabel=c.get("ylabel", ""),
                   xscale=c.get("xscale", "linear"))
        try:
            x, y = np.asarray(c["x"], float), np.asarray(c["y"], float)  # None -> NaN
        except (TypeError, ValueError):  # categories on x: drawn as recorded, no band
            ax.plot(c["x"], c["y"], color=colour, label=curve_label(run, c))
            continue
        ax.plot(x, y, color=colour, label=curve_label(run, c))
        if c.get("low") is not None and c.get("high") is not None:
            ax.fill_between(x, np.asarray(c["low"], float), np.asarray(c["high"], float),
                            color=colour, alpha=0.2, lw=0)
    ax.set_title(curve)
    if ax.lines:
        figure.legend(loc="outside lower center", fontsize=7)


class CompareView:
    """A list of finished runs, a curve name, and their overlay."""

    def __init__(self, reports: str | os.PathLike | None = None, notebook: str | None = None,
                 *, figsize: tuple[float, float] = (9.0, 3.5)):
        self.reports = Path(reports) if reports is not None else default_reports_dir()
        self.notebook, self.figsize = notebook, figsize
        self.runs = runs_with_curves(self.reports, notebook)
        self.select = widgets.SelectMultiple(
            options=[(r["label"], i) for i, r in enumerate(self.runs)],
            value=tuple(range(min(3, len(self.runs)))), rows=6, description="runs",
            layout=widgets.Layout(width="95%"))
        self.curve = widgets.Dropdown(options=self._curve_names(), description="curve")
        self.image = widgets.Image(format="png")
        self.select.observe(lambda _: self._refresh(), names="value")
        self.curve.observe(lambda _: self.draw(), names="value")
        finished = sum(not r["this_run"] for r in self.runs)
        note = widgets.HTML(f"{finished} finished run(s)"
                            + (" and this run" if finished < len(self.runs) else "")
                            + f" with curves in <code>{self.reports}/runs</code>")
        self.widget = widgets.VBox([note, self.select, self.curve, self.image])
        self.draw()

    def selected(self) -> list[dict[str, Any]]:
        return [self.runs[i] for i in self.select.value]

    def _curve_names(self) -> list[str]:
        names = []
        for run in self.selected():
            names += [n for n in run["curves"] if n not in names]
        return names

    def _refresh(self) -> None:
        names = self._curve_names()
        keep = self.curve.value if self.curve.value in names else (names[0] if names else None)
        self.curve.options = names
        self.curve.value = keep
        self.draw()

    def png(self) -> bytes:
        if self.curve.value is None:
            title = ("pick runs above" if self.runs else
                     f"no finished run with curves in {self.reports}/runs yet")
            return empty_png(self.figsize, title)
        width, height = self.figsize  # each legend line below the axes: a little taller
        figure = Figure(figsize=(width, height + 0.2 * len(self.selected())),
                        layout="constrained")
        draw_overlay(figure, self.selected(), self.curve.value)
        return figure_png(figure)

    def draw(self) -> None:
        self.image.value = self.png()

    def show(self, headless: bool | None = None):
        """The live widget, or (headless) the overlay of the selected runs as an image."""
        from IPython.display import Image


        if not (is_headless() if headless is None else headless):
            return self.widget
        return Image(self.png())
