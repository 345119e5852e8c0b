"""A report for a run that kept its record but not its executed notebook (the runs in
``results/``, imported by ``make reports``): the page a reader opens from the dashboard.

``render(folder)`` writes ``folder/report.html`` from ``provenance.json`` and
``metrics.json`` alone: the run header every report has (the claims with the paper's words,
their evidence and verdict, the headline, the parameters with their sources), then every
curve the run recorded (``metrics["curves"]``: ``x``, ``y``, the axis labels, a scale, and
the band of a per-seed curve with what it is, ``lab.runs.records.spread_curve``) as a small
figure, and a line saying the notebook's own figures were not kept. Each figure is
a PNG of at most ``FIGURE_BYTES``; a run's figures together at most ``RUN_BYTES`` (the rest
are listed by name), so the recorded runs add little to a clone.
"""

import base64
import io
import json
from pathlib import Path
from typing import Any

import nbformat

from lab.runs.records import read_metrics
from lab.runs.report import PROVENANCE_FILE, REPORT_FILE, export_html

FIGURE_BYTES = 40_000  # a curve's PNG, about 4 x 2.6 inches at 72 dpi
RUN_BYTES = 400_000  # every figure of one run


def _figure(name: str, curve: dict[str, Any]) -> bytes | None:
    """One curve as a PNG (None when it has nothing to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x, y = curve.get("x"), curve.get("y")
    if not x or y is None:
        return None
    y = np.asarray(y, dtype=float)
    fig, ax = plt.subplots(figsize=(4.2, 2.6), dpi=72)
    try:
        if y.ndim == 2:  # one row per seed (or unit): each drawn, their mean on top
            for row in y:
                ax.plot(x, row, color="C0", alpha=0.3, lw=0.8)
            ax.plot(x, y.mean(0), color="C0", lw=1.6, label=f"mean of {len(y)}")
            ax.legend(fontsize=7)
        else:
            band = curve.get("band")  # lab.runs.records.spread_curve: what line and band are
            ax.plot(x, y, marker="." if len(x) < 30 else None, color="C0", label=band)
            if curve.get("low") is not None and curve.get("high") is not None:
                ax.fill_between(np.asarray(x, float), np.asarray(curve["low"], float),
                                np.asarray(curve["high"], float), color="C0", alpha=0.2, lw=0)
            if band:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.25))
        if curve.get("xscale"):
            ax.set_xscale(curve["xscale"])
        if curve.get("labels") and len(curve["labels"]) == len(x):
            ax.set_xticks(x, curve["labels"], rotation=60, fontsize=6, ha="right")
        ax.set(xlabel=curve.get("xlabel", ""), ylabel=curve.get("ylabel", ""))
        ax.set_title(name, fontsize=8)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


def render(folder: str | Path) -> Path:
    """``folder/report.html`` from the run's record (the module docstring)."""
    folder = Path(folder)
    run = json.loads((folder / PROVENANCE_FILE).read_text())
    metrics = read_metrics(folder)
    run["metrics"] = metrics
    cells = [nbformat.v4.new_markdown_cell(
        f"This page is rendered from the run's record (`{PROVENANCE_FILE}` and "
        "`metrics.json`): the executed notebook and its own figures were not kept with it. "
        "The claims above are decided from the recorded per-unit numbers "
        "(`python -m lab claims verify` recomputes them); below, every curve it recorded.")]
    curves = metrics.get("curves") if isinstance(metrics.get("curves"), dict) else {}
    spent, left_out = 0, []
    for name, curve in curves.items():
        png = _figure(name, curve) if isinstance(curve, dict) else None
        if png is None:
            continue
        if len(png) > FIGURE_BYTES or spent + len(png) > RUN_BYTES:
            left_out.append(name)
            continue
        spent += len(png)
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output(
            "display_data", data={"image/png": base64.b64encode(png).decode()})]
        cells.append(cell)
    if not curves:
        cells.append(nbformat.v4.new_markdown_cell("The record holds no curves."))
    if left_out:
        cells.append(nbformat.v4.new_markdown_cell(
            "Over the page's size budget, not drawn: " + ", ".join(f"`{n}`" for n in left_out)))
    nb = nbformat.v4.new_notebook(cells=cells)
    return export_html(nb, run, folder / REPORT_FILE, hide_code=True)
