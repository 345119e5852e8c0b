"""HTML reports: one per run (nbconvert's lab template with a run header) and an index."""

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from lab.experiments.records import read_metrics

if TYPE_CHECKING:  # nbconvert and nbformat are imported where a report is written, not by
    import nbformat  # every kernel whose notebook shows a compare view


TEMPLATES = Path(__file__).parent / "templates"
PROVENANCE_FILE = "provenance.json"
REPORT_FILE = "report.html"
HEADLINE_METRICS = 4
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def export_html(notebook: "nbformat.NotebookNode", run: dict[str, Any], path: Path,
                *, hide_code: bool = False) -> Path:
    """Write the executed notebook as HTML: figures inline, widget state embedded
    (nbconvert does this when the notebook stores it), and a header with the run's
    parameters, metrics, provenance and status."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", extra_template_paths=[str(TEMPLATES)],
                            template_file="report.html.j2", exclude_input=hide_code,
                            exclude_input_prompt=hide_code, exclude_output_prompt=hide_code)
    body, _ = exporter.from_notebook_node(notebook, resources={"lab_run": run})
    path.write_text(body, encoding="utf-8")
    return path


def _headline(metrics: dict[str, Any]) -> dict[str, str]:
    scalars = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
    return {k: f"{v:.4g}" if isinstance(v, float) else str(v)
            for k, v in list(scalars.items())[:HEADLINE_METRICS]}


def load_runs(out: Path) -> list[dict[str, Any]]:
    """Every run under ``out/runs``, newest first."""
    runs = []
    for prov in (out / "runs").glob(f"*/{PROVENANCE_FILE}"):
        try:
            run = json.loads(prov.read_text())
        except json.JSONDecodeError:
            continue  # a run being written right now
        run["headline"] = _headline(read_metrics(prov.parent))
        run["href"] = f"runs/{prov.parent.name}/{REPORT_FILE}"
        runs.append(run)
    return sorted(runs, key=lambda r: r.get("started", ""), reverse=True)


def build_index(out: Path) -> Path:
    """Write ``out/index.html``: every run, newest first, and the latest report of each
    notebook (``out/<notebook>.html``)."""
    runs = load_runs(out)
    latest = {p.stem: p.name for p in sorted(out.glob("*.html")) if p.name != "index.html"}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    html = env.get_template("index.html.j2").render(runs=runs, latest=latest)
    index = out / "index.html"
    tmp = index.with_name(f".{index.name}.{os.getpid()}.tmp")  # whole, when runs finish at once
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(index)
    return index

