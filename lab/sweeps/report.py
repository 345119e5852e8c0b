"""What a sweep found: its trials, phase survival, best metric against compute; drawn and
written as an HTML page with links to every trial's own report.

    rows = trials(study)                       # one dict per trial
    draw(figure, {"HyperTrick": study, "random search": other})
    write(study, "reports")                    # reports/sweeps/<name>.html
"""

import base64
import html
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter
from optuna.trial import TrialState

from lab.runs.report import REPORT_FILE
from lab.sweeps.spec import SweepSpec, load_spec
from lab.sweeps.study import phases_reached


def spec_of(study: optuna.Study) -> SweepSpec:
    """The spec stored with the study (checked when the study was made)."""
    return load_spec(study.user_attrs["spec"], check_notebook=False)


def trials(study: optuna.Study) -> list[dict[str, Any]]:
    """Every trial the sweep ran (not the waiting ones, nor a surplus one)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING or t.user_attrs.get("surplus"):
            continue
        rows.append({
            "number": t.number, "state": t.state.name.lower(), "value": t.value,
            "phase": phases_reached(t), "parameters": t.user_attrs.get("parameters", t.params),
            "seconds": t.user_attrs.get("seconds"), "run_dir": t.user_attrs.get("run_dir"),
            "error": t.user_attrs.get("error"), "completed": t.datetime_complete,
            "phase_values": [t.intermediate_values[p] for p in sorted(t.intermediate_values)]})
    return rows


def survival(study: optuna.Study) -> list[int]:
    """How many trials reached each phase 1 .. Np."""
    reached = [r["phase"] for r in trials(study)]
    return [sum(p >= phase for p in reached) for phase in range(1, spec_of(study).phases + 1)]


def best_against_compute(study: optuna.Study) -> tuple[np.ndarray, np.ndarray]:
    """In the order trials finished: the compute used so far (in full trials: phases
    reached over Np, summed) and the best final metric found so far (NaN before the first
    trial that ran every phase)."""
    spec = spec_of(study)
    sign = 1.0 if spec.direction == "maximize" else -1.0
    done = sorted((r for r in trials(study) if r["completed"] is not None),
                  key=lambda r: r["completed"])
    compute, best, so_far = [], [], -math.inf
    used = 0.0
    for r in done:
        used += r["phase"] / spec.phases
        if r["state"] == "complete" and r["value"] is not None:
            so_far = max(so_far, sign * r["value"])
        compute.append(used)
        best.append(sign * so_far if math.isfinite(so_far) else math.nan)
    return np.array(compute), np.array(best)


def best(study: optuna.Study, k: int = 5) -> list[dict[str, Any]]:
    """The ``k`` best finished trials, best first."""
    reverse = spec_of(study).direction == "maximize"
    done = [r for r in trials(study) if r["state"] == "complete" and r["value"] is not None]
    return sorted(done, key=lambda r: r["value"], reverse=reverse)[:k]


def summary_line(study: optuna.Study) -> str:
    rows = trials(study)
    counts = {s: sum(r["state"] == s for r in rows) for s in ("complete", "pruned", "fail")}
    top = best(study, 1)
    compute, _ = best_against_compute(study)
    return (f"{study.study_name}: {len(rows)} trials ({counts['complete']} complete, "
            f"{counts['pruned']} pruned, {counts['fail']} failed), compute "
            f"{compute[-1] if len(compute) else 0:.2f} full trials, best "
            + (f"{top[0]['value']:.4g} (trial {top[0]['number']}: {top[0]['parameters']})"
               if top else "none"))


def draw(figure: Figure, studies: dict[str, optuna.Study]) -> None:
    """Metric against each searched parameter (the first study; pruned trials at their last
    phase's value), phase survival and best metric against compute for every study."""
    first = next(iter(studies.values()))
    spec = spec_of(first)
    dims = [d for d in spec.space]
    axes = figure.subplots(1, len(dims) + 2)
    rows = trials(first)
    for ax, d in zip(axes, dims, strict=False):
        for state, marker, color in (("complete", "o", "C0"), ("pruned", "x", "C7")):
            xs = [r["parameters"].get(d.name) for r in rows if r["state"] == state]
            ys = [r["value"] if state == "complete" else r["phase_values"][-1]
                  for r in rows if r["state"] == state]
            keep = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if keep:
                ax.scatter(*zip(*keep, strict=True), marker=marker, color=color, label=state)
        if d.kind in ("loguniform", "qloguniform"):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # no crowded minor labels
        ax.set_xlabel(d.name)
    axes[0].set_ylabel(spec.metric)
    axes[0].legend(fontsize=7)
    phases = np.arange(1, spec.phases + 1)
    width = 0.8 / len(studies)
    for i, (label, study) in enumerate(studies.items()):
        axes[-2].bar(phases + (i - (len(studies) - 1) / 2) * width, survival(study), width,
                     label=label)
        compute, found = best_against_compute(study)
        axes[-1].step(compute, found, where="post", label=label)
    axes[-2].set(xlabel="phase", ylabel="trials that reached it", title="phase survival",
                 xticks=phases)
    axes[-1].set(xlabel="compute (full trials of training)", ylabel=f"best {spec.metric}",
                 title="best found against compute")
    axes[-2].legend(fontsize=7)
    axes[-1].legend(fontsize=7)
    figure.tight_layout()


def png(studies: dict[str, optuna.Study]) -> bytes:
    import io

    figure = Figure(figsize=(4 * (len(spec_of(next(iter(studies.values()))).space) + 2), 3.6))
    draw(figure, studies)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    return buffer.getvalue()


def table(study: optuna.Study, folder: Path, k: int | None = None) -> str:
    """An HTML table of the trials (the ``k`` best finished ones when given), best first,
    each linking to its run's report relative to ``folder``."""
    rows = best(study, k) if k else trials(study)
    cells = []
    for r in rows:
        link = ""
        if r["run_dir"]:
            href = os.path.relpath(Path(r["run_dir"]) / REPORT_FILE, folder)
            link = f"<a href='{html.escape(href)}'>report</a>"
        value = "" if r["value"] is None else f"{r['value']:.4g}"
        params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in r["parameters"].items())
        cells.append(f"<tr><td>{r['number']}</td><td>{r['state']}</td><td>{value}</td>"
                     f"<td>{r['phase']}</td><td>{html.escape(params)}</td>"
                     f"<td>{html.escape(r['error'] or '')}</td><td>{link}</td></tr>")
    return ("<table><tr><th>trial</th><th>state</th><th>metric</th><th>phase</th>"
            "<th>parameters</th><th>error</th><th>report</th></tr>" + "".join(cells)
            + "</table>")


def write(study: optuna.Study, out: str | Path, others: dict[str, optuna.Study] | None = None
          ) -> Path:
    """``<out>/sweeps/<study>.html``: the summary, the figure and every trial with a link
    to its report; ``others`` are drawn beside it for comparison."""
    folder = Path(out) / "sweeps"
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_of(study)
    image = base64.b64encode(png({study.study_name: study} | (others or {}))).decode()
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>sweep {html.escape(study.study_name)}</title>
<style>body {{font-family: sans-serif; margin: 2em}} td, th {{padding: 0.2em 0.6em;
text-align: left}} tr:nth-child(even) {{background: #f4f4f4}}</style></head><body>
<h1>Sweep {html.escape(study.study_name)}</h1>
<p>{html.escape(summary_line(study))}</p>
<p>notebook <code>{html.escape(Path(spec.notebook).name)}</code>, metric
<code>{html.escape(spec.metric)}</code> ({spec.direction}), {spec.phases} phases, survival
{spec.survival}, pruner {spec.pruner}, sampler {spec.sampler} (seed {spec.seed}), fixed
{html.escape(str(spec.fixed))}</p>
<img alt="sweep results" src="data:image/png;base64,{image}">
<h2>Best trials</h2>{table(study, folder, 5)}
<h2>All trials</h2>{table(study, folder)}
</body></html>"""
    path = folder / f"{study.study_name}.html"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
