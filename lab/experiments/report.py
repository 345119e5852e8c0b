"""HTML reports: one per run, an index of runs, and the claims dashboard.

- ``<run>/report.html``: nbconvert's lab template under a header that leads with the run's
  status and the paper's claims as the notebook declared them (``lab.experiments.claims``),
  then its headline metrics; curves and other arrays stay in ``metrics.json`` (linked).
- ``index.html``: every run, newest first, with its claims as verdict badges and its
  headline metrics; filters by notebook and status; which runs ``make reports`` reused.
- ``claims.html``: one row per claim, from the latest ``ok`` run of each notebook and
  preset: what reproduces, at which scale, and what does not.
"""

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from lab.experiments.claims import RESERVED, VERDICTS, claims_of, fmt, headline_of, study_of
from lab.experiments.records import METRICS_FILE, read_metrics

if TYPE_CHECKING:  # nbconvert and nbformat are imported where a report is written, not by
    import nbformat  # every kernel whose notebook shows a compare view


TEMPLATES = Path(__file__).parent / "templates"
PROVENANCE_FILE = "provenance.json"
REPORT_FILE = "report.html"
REUSED_FILE = "reused.json"  # notebook -> the run the last `make reports` reused, and when
CLAIMS_PAGE = "claims.html"
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
    body, _ = exporter.from_notebook_node(notebook, resources={"lab_run": header(run)})
    path.write_text(body, encoding="utf-8")
    return path


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shown_claims(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared claims with their numbers formatted as the pages print them."""
    return [c | {"numbers": {k: fmt(v) for k, v in c["numbers"].items()}}
            for c in claims_of(metrics)]


def header(run: dict[str, Any]) -> dict[str, Any]:
    """What a run report's header shows: the run record with its declared claims, headline
    and study, parameters shortened, and only the names of everything else recorded."""
    metrics = run.get("metrics") or {}
    headline = headline_of(metrics)
    shown = {*RESERVED, *headline}
    return run | {
        "claims": _shown_claims(metrics), "study": study_of(metrics),
        "headline": {k: fmt(v) for k, v in headline.items()},
        "shown_parameters": {k: _short(v) for k, v in (run.get("parameters") or {}).items()},
        "other_metrics": sorted(k for k in metrics if k not in shown),
        "metrics_file": METRICS_FILE,
    }


def _preset(run: dict[str, Any]) -> str:
    return str((run.get("parameters") or {}).get("preset", "default"))


def load_runs(out: Path) -> list[dict[str, Any]]:
    """Every run under ``out/runs``, newest first, with its declared claims, headline
    metrics and study (``lab.experiments.claims``), and whether ``make reports`` last
    reused it."""
    try:
        reused = {v.get("run"): v.get("reused_at")
                  for v in json.loads((out / REUSED_FILE).read_text()).values()}
    except (OSError, json.JSONDecodeError, AttributeError):
        reused = {}
    runs = []
    for prov in (out / "runs").glob(f"*/{PROVENANCE_FILE}"):
        try:
            run = json.loads(prov.read_text())
        except json.JSONDecodeError:
            continue  # a run being written right now
        metrics = read_metrics(prov.parent)
        run |= {"folder": str(prov.parent), "href": f"runs/{prov.parent.name}/{REPORT_FILE}",
                "metrics_href": f"runs/{prov.parent.name}/{METRICS_FILE}",
                "claims": _shown_claims(metrics), "study": study_of(metrics),
                "headline": {k: fmt(v) for k, v in headline_of(metrics).items()},
                "preset": _preset(run), "reused_at": reused.get(prov.parent.name)}
        runs.append(run)
    return sorted(runs, key=lambda r: r.get("started", ""), reverse=True)


def latest_claims(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims dashboard's rows: every claim of the latest ``ok`` run of each notebook
    and preset (a preset's run is its own row: the CPU default beside the claim-sized
    run), sorted by notebook, then the default preset first. A notebook and preset whose
    latest run declares no claims gives one row without a claim."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:  # newest first
        if run.get("status") == "ok":
            latest.setdefault((run.get("notebook", ""), run["preset"]), run)
    rows = []
    for (notebook, preset), run in sorted(latest.items(),
                                          key=lambda kv: (kv[0][0], kv[0][1] != "default",
                                                          kv[0][1])):
        overrides = {k: _short(v, 40) for k, v in (run.get("overrides") or {}).items()
                     if k != "preset"}
        base = {"notebook": notebook, "preset": preset, "run": run, "overrides": overrides}
        group = [base | {"claim": c} for c in run["claims"]] or [base | {"claim": None}]
        for i, row in enumerate(group):  # the page shows a run's cells once, spanning rows
            row |= {"first": i == 0, "span": len(group)}
        rows += group
    return rows


def _write_page(out: Path, name: str, template: str, **context: Any) -> Path:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    page = out / name
    tmp = page.with_name(f".{page.name}.{os.getpid()}.tmp")  # whole, when runs end at once
    tmp.write_text(env.get_template(template).render(**context), encoding="utf-8")
    tmp.replace(page)
    return page


def build_index(out: Path) -> Path:
    """Write ``out/index.html`` (every run, newest first, and the latest report of each
    notebook, ``out/<notebook>.html``) and ``out/claims.html``."""
    out = Path(out)
    runs = load_runs(out)
    rows = latest_claims(runs)
    counts = {v: sum(1 for r in rows if r["claim"] and r["claim"]["verdict"] == v)
              for v in VERDICTS}
    _write_page(out, CLAIMS_PAGE, "claims.html.j2", rows=rows, counts=counts)
    latest = {p.stem: p.name for p in sorted(out.glob("*.html"))
              if p.name not in ("index.html", CLAIMS_PAGE)}
    notebooks = sorted({r.get("notebook", "") for r in runs})
    statuses = sorted({r.get("status", "") for r in runs})
    return _write_page(out, "index.html", "index.html.j2", runs=runs, latest=latest,
                       notebooks=notebooks, statuses=statuses, counts=counts,
                       claims_page=CLAIMS_PAGE)

