"""HTML reports: one per run, an index of runs, and the claims dashboard.

- ``<run>/report.html``: nbconvert's lab template under a header that leads with the run's
  status and the paper's claims as the notebook declared them (``lab.runs.claims``),
  then its headline metrics and the parameters that differ from the notebook's defaults,
  each with its source; curves and other arrays stay in ``metrics.json`` (linked).
- ``index.html``: every run, newest first, with its claims as verdict badges and its
  headline metrics; filters by notebook and status; which runs ``make reports`` reused (a
  notebook's latest report links to the run it reused) and which were recorded elsewhere
  and imported (``lab.runs.imports``).
- ``claims.html``: one row per claim (notebook and claim name) with its verdict at each
  scale measured, smallest to largest (:func:`scale_of`): this machine's default run, the
  other presets on CPU, then GPU runs; the headline counts take each claim once, at its
  largest scale. Under each row, collapsed, the claim's history (:func:`claim_history`):
  every ``ok`` run at each of those scales, newest first, a changed verdict flagged.
"""

import json
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jinja2

from lab.runs.claims import (
    RESERVED,
    VERDICTS,
    WEAKLY,
    claims_of,
    criterion,
    evidence,
    fmt,
    headline_of,
    label_of,
    study_of,
)
from lab.runs.records import METRICS_FILE, read_metrics

if TYPE_CHECKING:  # nbconvert and nbformat are imported where a report is written, not by
    import nbformat  # every kernel whose notebook shows a compare view


TEMPLATES = Path(__file__).parent / "templates"
PROVENANCE_FILE = "provenance.json"
REPORT_FILE = "report.html"
REUSED_FILE = "reused.json"  # notebook -> the run the last `make reports` reused, and when
CLAIMS_PAGE = "claims.html"
IMPORTED_FILE = "imported.json"  # in a run imported from elsewhere: where from, and when
ACCELERATORS = ("cuda", "gpu", "rocm", "tpu")  # in a JAX device's name: not this CPU
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def export_html(notebook: "nbformat.NotebookNode", run: dict[str, Any], path: Path,
                *, hide_code: bool = False) -> Path:
    """Write the executed notebook as HTML: figures inline, widget state embedded
    (nbconvert does this when the notebook stores it), and a header with the run's
    parameters, metrics, provenance and status."""
    body, _ = _exporter(hide_code).from_notebook_node(notebook,
                                                     resources={"lab_run": header(run)})
    path.write_text(body, encoding="utf-8")
    return path


_EXPORTERS = threading.local()  # per thread: an exporter's preprocessors keep state


def _exporter(hide_code: bool):
    """The HTML exporter of this thread, made once: it compiles its Jinja templates on first
    use (0.4-0.6 s a run, paid again by every run of a sweep worker or a batch otherwise)."""
    made = getattr(_EXPORTERS, "by_hide_code", None)
    if made is None:
        made = _EXPORTERS.by_hide_code = {}
    if hide_code not in made:
        from nbconvert import HTMLExporter

        made[hide_code] = HTMLExporter(
            template_name="lab", extra_template_paths=[str(TEMPLATES)],
            template_file="report.html.j2", exclude_input=hide_code,
            exclude_input_prompt=hide_code, exclude_output_prompt=hide_code)
    return made[hide_code]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shown_claims(metrics: dict[str, Any], run: dict[str, Any] | None = None
                  ) -> list[dict[str, Any]]:
    """The declared claims with their numbers formatted as the pages print them, their
    evidence and criterion in one line each (``lab.runs.claims.evidence``, ``criterion``)
    and the ``flags`` a reader must see beside the verdict: a criterion declared after a
    run, a verdict re-derived from an older record, a timing claim not measured alone."""
    rederived = metrics.get("claims_rederived")
    before = {c.get("name"): c.get("verdict") for c in metrics.get("claims_as_recorded") or []
              if isinstance(c, dict)}
    shown = []
    for c in claims_of(metrics):
        flags = []
        if c.get("to_remake"):
            flags.append(f"to re-make: {c['to_remake']}")
        if c.get("declared_after"):
            flags.append(f"criterion declared after {c['declared_after']}")
        if isinstance(rederived, dict):
            was = before.get(c["name"])
            if was == WEAKLY:  # the retired word, named once: in the README and RESULTS
                was = "the retired verdict between holds and does not hold"
            flags.append(f"re-derived {str(rederived.get('date', ''))[:10]} under the shared "
                         "rule from this run's recorded numbers"
                         + (f" (recorded as: {was})" if was and was != c["verdict"] else ""))
        if c.get("timing") and run is not None and run.get("alone") is not True:
            flags.append("timed beside other kernels" if run.get("alone") is False
                         else "timing: not recorded whether the kernel ran alone")
        shown.append(c | {"numbers": {k: fmt(v) for k, v in c["numbers"].items()},
                          "evidence": evidence(c), "criterion": criterion(c), "flags": flags})
    return shown


def changed_parameters(run: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The parameters that differ from the notebook's defaults, name -> (value, source):
    the source is "explicit" or "preset NAME", from the record's ``parameter_sources``;
    an older record without them gives its explicit ``overrides``."""
    values = run.get("parameters") or {}
    overrides = run.get("overrides") or {}
    sources = run.get("parameter_sources")
    if isinstance(sources, dict):
        return {k: (_short(values.get(k, overrides.get(k)), 40), str(source))
                for k, source in sources.items() if source != "default"}
    return {k: (_short(v, 40), "explicit") for k, v in overrides.items()}


def header(run: dict[str, Any]) -> dict[str, Any]:
    """What a run report's header shows: the run record with its declared claims, headline
    and study, parameters shortened, the ones that differ from the notebook's defaults with
    their source, and only the names of everything else recorded."""
    metrics = run.get("metrics") or {}
    headline = headline_of(metrics)
    shown = {*RESERVED, *headline}
    return run | {
        "claims": _shown_claims(metrics, run), "study": study_of(metrics),
        "headline": {k: fmt(v) for k, v in headline.items()},
        "headline_labels": {k: label_of(metrics, k) for k in headline},
        "shown_parameters": {k: _short(v) for k, v in (run.get("parameters") or {}).items()},
        "changed_parameters": changed_parameters(run),
        "other_metrics": sorted(k for k in metrics if k not in shown),
        "metrics_file": METRICS_FILE,
    }


def _preset(run: dict[str, Any]) -> str:
    """The run's preset: the record's ``preset``, else (older records) its parameter."""
    return str(run.get("preset") or (run.get("parameters") or {}).get("preset", "default"))


def device_of(run: dict[str, Any]) -> tuple[str, bool]:
    """The run's JAX devices as the pages name them ("cpu", "NVIDIA H100 80GB HBM3",
    "8 x NVIDIA H100 80GB HBM3"), and whether they are accelerators (GPU, TPU)."""
    if run.get("jax_devices") == []:  # the kernel never imported jax
        return "no JAX device", False
    entries = [str(d) for d in run.get("jax_devices") or []]
    if not entries:
        return "unknown device", False
    # each entry is "<platform>:<id> <kind>", e.g. "cuda:0 NVIDIA H100 80GB HBM3"
    kinds = [e.split(" ", 1)[1] if ":" in e.split(" ", 1)[0] and " " in e else e
             for e in entries]
    accelerated = any(a in e.lower() for e in entries for a in ACCELERATORS)
    if len(set(kinds)) == 1:
        return (kinds[0] if len(kinds) == 1 else f"{len(kinds)} x {kinds[0]}"), accelerated
    return ", ".join(sorted(set(kinds))), accelerated


def _commit(run: dict[str, Any]) -> str:
    git = run.get("git") or {}
    return (str(git.get("commit") or "unknown")[:8]) + ("+dirty" if git.get("dirty") else "")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def reuses(out: Path) -> dict[str, dict[str, Any]]:
    """What the last ``make reports`` reused (``REUSED_FILE``, written by the runner):
    notebook file name -> {"run": the run folder's name, "reused_at": when}; entries
    that are not of that shape are left out."""
    reused = _read_json(out / REUSED_FILE)
    if not isinstance(reused, dict):
        return {}
    return {notebook: entry for notebook, entry in reused.items()
            if isinstance(entry, dict) and isinstance(entry.get("run"), str)}


def load_runs(out: Path) -> list[dict[str, Any]]:
    """Every run under ``out/runs``, newest first, with its declared claims, headline
    metrics and study (``lab.runs.claims``), its device, its folder's ``name``, whether
    ``make reports`` last reused it and whether it was imported (``imported``: where from
    and when)."""
    reused = {v["run"]: v.get("reused_at") for v in reuses(out).values()}
    runs = []
    for prov in (out / "runs").glob(f"*/{PROVENANCE_FILE}"):
        folder = prov.parent
        if folder.name.startswith("."):
            continue  # an import being copied (lab.runs.imports)
        try:
            run = json.loads(prov.read_text())
        except json.JSONDecodeError:
            continue  # a run being written right now
        metrics = read_metrics(folder)
        imported = _read_json(folder / IMPORTED_FILE)
        device, accelerated = device_of(run)
        has_report = (folder / REPORT_FILE).exists()
        run |= {"folder": str(folder), "name": folder.name,
                "href": f"runs/{folder.name}/{REPORT_FILE}" if has_report else None,
                "metrics_href": f"runs/{folder.name}/{METRICS_FILE}",
                "claims": _shown_claims(metrics, run), "study": study_of(metrics),
                "headline": {k: fmt(v) for k, v in headline_of(metrics).items()},
                "headline_labels": {k: label_of(metrics, k) for k in headline_of(metrics)},
                "preset": _preset(run), "reused_at": reused.get(folder.name),
                "imported": imported if isinstance(imported, dict) else None,
                "device": device, "accelerated": accelerated, "commit": _commit(run)}
        runs.append(run)
    return sorted(runs, key=lambda r: r.get("started", ""), reverse=True)


class Scale(NamedTuple):
    """Where a claim was measured: a preset on this kind of device. Ordered from the
    smallest to the largest: the default run, another preset on CPU, a GPU (or TPU) run."""

    rank: int  # 0 the default preset on CPU, 1 another preset on CPU, 2 an accelerator
    preset: str
    device: str  # "cpu" for every CPU run, else the accelerator's name

    @property
    def label(self) -> str:
        if self.rank < 2:
            return "default" if self.rank == 0 else f"preset {self.preset}"
        return self.device + ("" if self.preset == "default" else f", preset {self.preset}")

    @property
    def order(self) -> tuple:
        return self.rank, self.preset != "default", self.preset, self.device


SCALE_NAMES = ("the default run", "another preset on CPU", "a GPU run")  # by Scale.rank


def scale_of(run: dict[str, Any]) -> Scale:
    """The scale a run measured at (``load_runs`` gives ``preset``, ``device`` and
    ``accelerated``)."""
    if run["accelerated"]:
        return Scale(2, run["preset"], run["device"])
    return Scale(0 if run["preset"] == "default" else 1, run["preset"], "cpu")


def _cell(run: dict[str, Any], scale: Scale, claim: dict[str, Any] | None) -> dict[str, Any]:
    explicit = {k: value for k, (value, source) in changed_parameters(run).items()
                if source == "explicit" and k != "preset"}
    return {"scale": scale, "label": scale.label, "run": run, "claim": claim,
            "verdict": claim["verdict"] if claim else None,
            "numbers": claim["numbers"] if claim else {},
            "date": (run.get("started") or "")[:10], "device": run["device"],
            "commit": run["commit"], "recorded": run["imported"] is not None,
            "explicit": explicit, "counted": False}


def claim_history(runs: list[dict[str, Any]]) -> dict[tuple[str, Scale, str],
                                                     list[dict[str, Any]]]:
    """Each claim's history: (notebook, scale (:func:`scale_of`), claim name) -> the
    dashboard's cell of every ``ok`` run that declares the claim at that scale, newest
    first, each with ``was``: the verdict of the run before it (the next older one in the
    list) where it differs, else None. Failed, interrupted and pruned runs have no part in
    it; ``runs`` as :func:`load_runs` gives them."""
    history: dict[tuple[str, Scale, str], list[dict[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: r.get("started", ""), reverse=True):
        if run.get("status") != "ok":
            continue
        scale, names = scale_of(run), set()
        for claim in run["claims"]:
            if claim["name"] not in names:  # a name declared twice counts once
                names.add(claim["name"])
                key = run.get("notebook", ""), scale, claim["name"]
                history.setdefault(key, []).append(_cell(run, scale, claim))
    for entries in history.values():
        for newer, older in zip(entries, [*entries[1:], None], strict=True):
            changed = older is not None and older["verdict"] != newer["verdict"]
            newer["was"] = older["verdict"] if changed else None
    changes = criterion_changes(runs)
    for (notebook, _, name), entries in history.items():
        for entry in entries:
            entry["criterion_changed"] = changes.get((notebook, name, entry["run"]["name"]))
    return history


def criterion_changes(runs: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(notebook, claim name, run folder name) -> "criterion changed after the run of DATE"
    for every ok run whose declaration fingerprint of the claim differs from that of the
    run of the same claim before it (any scale; runs recorded before the shared rule have
    no fingerprint and are skipped). Computed from the records alone."""
    out, last = {}, {}
    for run in sorted(runs, key=lambda r: r.get("started", "")):
        if run.get("status") != "ok":
            continue
        for claim in run["claims"]:
            if not claim.get("declaration"):
                continue
            key = run.get("notebook", ""), claim["name"]
            before = last.get(key)
            if before is not None and before[0] != claim["declaration"]:
                out[key + (run["name"],)] = (f"criterion changed after the run of "
                                             f"{before[1]} ({before[0]} -> "
                                             f"{claim['declaration']})")
            last[key] = claim["declaration"], (run.get("started") or "")[:10]
    return out


def claim_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims dashboard's rows, by notebook: one per claim (notebook, claim name) with
    one cell per scale measured, from the latest ``ok`` run of each preset and device
    (:func:`scale_of`), smallest scale first; ``counted`` is the cell the headline counts
    take: the largest scale, the newest on a tie. A scale whose latest run declares no
    claims gives a row of its own without a claim. Each cell carries the claim's
    ``history`` at its scale (:func:`claim_history`; the cell's run first) and ``was``,
    the verdict before it where it changed; a row counts its ``earlier`` runs and its
    verdict ``changes``."""
    history = claim_history(runs)
    latest: dict[tuple[str, Scale], dict[str, Any]] = {}
    for run in runs:  # newest first
        if run.get("status") == "ok":
            latest.setdefault((run.get("notebook", ""), scale_of(run)), run)
    claims: dict[tuple[str, str], list[dict[str, Any]]] = {}
    plain, position = [], {}
    for (notebook, scale), run in latest.items():
        if not run["claims"]:
            plain.append({"notebook": notebook, "claim": None, "cells": [_cell(run, scale, None)],
                          "counted": None, "order": (1, scale.order), "earlier": 0,
                          "changes": 0})
        for i, claim in enumerate(run["claims"]):
            entries = history[notebook, scale, claim["name"]]
            claims.setdefault((notebook, claim["name"]), []).append(
                _cell(run, scale, claim) | {"history": entries, "was": entries[0]["was"],
                                            "criterion_changed": entries[0]["criterion_changed"]})
            position[notebook, claim["name"]] = min(i, position.get((notebook, claim["name"]), i))
    rows = []
    for (notebook, name), cells in claims.items():
        cells.sort(key=lambda c: c["scale"].order)
        counted = max(cells, key=lambda c: (c["scale"].rank, c["run"].get("started", "")))
        counted["counted"] = True
        # the paper's number is the paper's, whichever run recorded it (the newest that did:
        # runs recorded before the field have none)
        paper_value = next((c.get("paper_value") for run in runs
                            if run.get("notebook", "") == notebook
                            for c in run.get("claims") or []
                            if c.get("name") == name and c.get("paper_value")), "")
        rows.append({"notebook": notebook, "claim": counted["claim"], "cells": cells,
                     "paper_value": paper_value,
                     "counted": counted, "order": (0, position[notebook, name], name),
                     "earlier": sum(len(c["history"]) - 1 for c in cells),
                     "changes": sum(e["was"] is not None for c in cells for e in c["history"])})
    rows = sorted(rows + plain, key=lambda r: (r["notebook"], r["order"]))
    for row in rows:  # the page shows a notebook's paper once, spanning its rows
        mine = [r for r in rows if r["notebook"] == row["notebook"]]
        row |= {"first": mine[0] is row, "span": len(mine),
                "study": _study(c["run"] for r in mine for c in r["cells"])}
    return rows


def _study(runs) -> dict[str, str]:
    """The study of the newest run that names its paper."""
    named = [r for r in runs if r["study"].get("paper")]
    return max(named, key=lambda r: r.get("started", ""))["study"] if named else {}


def headline_counts(rows: list[dict[str, Any]]) -> tuple[dict[str, int], str]:
    """Each claim counted once, at its largest scale measured: the number per verdict, and
    the sentence that says so."""
    counted = [r["counted"] for r in rows if r["counted"]]
    counts = {v: sum(1 for c in counted if c["verdict"] == v) for v in VERDICTS}
    at = [sum(1 for c in counted if c["scale"].rank == rank) for rank in range(3)]
    note = ("Each claim is counted once, at the largest scale measured (a GPU run, then a "
            "preset other than the default on CPU, then the default run; the newest on a "
            "tie): " + ", ".join(f"{at[r]} at {SCALE_NAMES[r]}" for r in (2, 1, 0)) + ".")
    return counts, note


_PAGES = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
"""The index's and the claims page's templates, compiled once a process (Jinja reloads a
template whose file changed)."""


def _write_page(out: Path, name: str, template: str, **context: Any) -> Path:
    page = out / name
    tmp = page.with_name(f".{page.name}.{os.getpid()}.tmp")  # whole, when runs end at once
    tmp.write_text(_PAGES.get_template(template).render(**context), encoding="utf-8")
    tmp.replace(page)
    return page


def latest_reports(stems: list[str], reused: dict[str, dict[str, Any]],
                   runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The latest report of each notebook, ``out/<stem>.html``: stem -> {"href": the page,
    "reused": None, or, where the last ``make reports`` reused a run (``reused`` as
    :func:`reuses` gives it), that run's folder ``name``, the ``run`` itself from ``runs``
    (None when its folder is gone) and ``reused_at``}."""
    by_name = {run["name"]: run for run in runs}
    pages = {}
    for stem in sorted(stems):
        entry = reused.get(f"{stem}.ipynb")
        pages[stem] = {"href": f"{stem}.html", "reused": entry and {
            "name": entry["run"], "run": by_name.get(entry["run"]),
            "reused_at": str(entry.get("reused_at") or "")}}
    return pages


PAPERS = Path(__file__).resolve().parents[2] / "docs" / "papers"
"""Each family's page (``docs/papers/<notebook name without its number>.md``): what the
paper claims, our set-up, the recorded runs and the history; the dashboard links it."""


def paper_page(notebook: str, out: Path) -> str | None:
    """The link from ``out`` to ``notebook``'s paper page, None where it has none."""
    family = re.sub(r"^\d+_", "", Path(notebook).stem)
    page = PAPERS / f"{family}.md"
    return os.path.relpath(page, Path(out).resolve()) if family and page.exists() else None


def build_index(out: Path) -> Path:
    """Write ``out/index.html`` (every run, newest first, and the latest report of each
    notebook, ``out/<notebook>.html``) and ``out/claims.html``."""
    out = Path(out)
    runs = load_runs(out)
    rows = claim_rows(runs)
    for row in rows:
        row["paper_page"] = paper_page(row["notebook"], out)
    counts, scale_note = headline_counts(rows)
    _write_page(out, CLAIMS_PAGE, "claims.html.j2", rows=rows, counts=counts,
                scale_note=scale_note)
    pages = [p for p in out.glob("*.html") if p.name not in ("index.html", CLAIMS_PAGE)]
    latest = latest_reports([p.stem for p in pages], reuses(out), runs)
    notebooks = sorted({r.get("notebook", "") for r in runs})
    statuses = sorted({r.get("status", "") for r in runs})
    return _write_page(out, "index.html", "index.html.j2", runs=runs, latest=latest,
                       notebooks=notebooks, statuses=statuses, counts=counts,
                       claims_page=CLAIMS_PAGE)
