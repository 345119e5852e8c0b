"""The runs of a reports folder as a table, and what differs between two runs.

    python -m lab runs [--out reports] [--notebook NAME] [--csv]
    python -m lab runs diff RUN_A RUN_B

``rows(out, notebook)`` gives one dict per run (newest first): its folder, notebook, status,
preset, device, start, minutes, the parameters that differ from the notebook's defaults
(``changed``, as ``name=value; ...``; the record's ``parameter_sources``, or for an older
record the notebook's defaults in ``notebooks/``) and its headline
metrics, each as its own column (``frame`` returns them as a pandas DataFrame).
``diff(a, b)`` lists, per section (parameters, packages, inputs, metrics), every key whose
value differs between the two runs' records.
"""

import csv
import io
import json
from pathlib import Path
from typing import Any

from lab.runs.claims import is_scalar
from lab.runs.params import notebook_parameters
from lab.runs.records import METRICS_FILE, read_metrics
from lab.runs.report import PROVENANCE_FILE, load_runs

FIXED = ("run", "notebook", "status", "preset", "device", "started", "minutes", "changed")


def rows(out: str | Path = "reports", notebook: str | None = None) -> list[dict[str, Any]]:
    """One row per run under ``out/runs`` (``notebook``: that notebook's only, by file name
    or stem), newest first."""
    found, defaults = [], {}
    for r in load_runs(Path(out)):
        name = r.get("notebook", "")
        if notebook is not None and notebook not in (name, Path(name).stem):
            continue
        sources = r.get("parameter_sources")
        if sources is None:  # an older record: against the notebook's defaults, if it is here
            if name not in defaults:
                path = Path("notebooks") / name
                defaults[name] = ({k: p.default for k, p in notebook_parameters(path).items()}
                                  if path.is_file() else {})
            sources = {k: "default" if defaults[name].get(k, v) == v else "?"
                       for k, v in (r.get("parameters") or {}).items()}
        changed = "; ".join(f"{k}={json.dumps(v)}" for k, v in (r.get("parameters") or {}).items()
                            if sources.get(k, "default") != "default")
        duration = r.get("duration_s")
        found.append({"run": r["name"], "notebook": name, "status": r.get("status"),
                      "preset": r.get("preset"), "device": r.get("device"),
                      "started": (r.get("started") or "")[:16].replace("T", " "),
                      "minutes": None if duration is None else round(duration / 60, 1),
                      "changed": changed} | dict(r.get("headline") or {}))
    return found


def frame(out: str | Path = "reports", notebook: str | None = None):
    """:func:`rows` as a pandas DataFrame (pandas comes with statsmodels)."""
    import pandas as pd

    return pd.DataFrame(rows(out, notebook))


def columns(table: list[dict[str, Any]]) -> list[str]:
    extra = []
    for row in table:
        extra += [k for k in row if k not in FIXED and k not in extra]
    return [*FIXED, *extra]


def as_csv(table: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns(table), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def as_text(table: list[dict[str, Any]]) -> str:
    """Each run on one line: status, preset, device, minutes, folder; then what it changed
    and its headline metrics, indented."""
    lines = []
    for row in table:
        minutes = "?" if row["minutes"] is None else f"{row['minutes']:g}"
        lines.append(f"{row['status']:>11}  {row['preset'] or 'default':<12} "
                     f"{row['device'] or '?':<14} {minutes:>6} min  {row['run']}")
        if row["changed"]:
            lines.append(f"{'':13}changed: {row['changed']}")
        shown = {k: v for k, v in row.items() if k not in FIXED}
        if shown:
            lines.append(f"{'':13}" + ", ".join(f"{k} {v}" for k, v in shown.items()))
    return "\n".join(lines)


def _record(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        raise ValueError(f"{folder} holds no run record ({PROVENANCE_FILE}); give two run "
                         "folders (reports/runs/<run>)") from None


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def diff(a: str | Path, b: str | Path) -> dict[str, list[tuple[str, Any, Any]]]:
    """``{section: [(key, a's value, b's value), ...]}`` for the keys that differ:
    ``parameters``, ``packages`` (with Python), ``inputs`` (the notebook, the parameters, the
    dependencies, and each module and data file by its digest) and ``metrics`` (the scalars
    of metrics.json; arrays and the claims' evidence are compared as a whole)."""
    ra, rb = _record(Path(a)), _record(Path(b))

    def files(r: dict[str, Any]) -> dict[str, Any]:
        inputs = r.get("inputs") or {}
        out = {k: inputs.get(k) for k in ("notebook", "parameters", "dependencies")}
        for kind, found in (inputs.get("files") or {}).items():
            out |= {f"{kind}: {path}": digest[:12] for path, digest in found.items()}
        return out

    def scalars(folder: Path) -> dict[str, Any]:
        metrics = read_metrics(folder) if (folder / METRICS_FILE).exists() else {}
        return {k: (v if is_scalar(v) else json.dumps(v, sort_keys=True, default=str)[:80])
                for k, v in metrics.items()}

    return {"parameters": _differing(ra.get("parameters") or {}, rb.get("parameters") or {}),
            "packages": _differing(ra.get("versions") or {}, rb.get("versions") or {}),
            "inputs": _differing(files(ra), files(rb)),
            "metrics": _differing(scalars(Path(a)), scalars(Path(b)))}


def diff_text(a: str | Path, b: str | Path) -> str:
    sections = diff(a, b)
    lines = [f"a: {a}", f"b: {b}"]
    for section, found in sections.items():
        lines.append(f"{section}: " + ("the same" if not found else f"{len(found)} differ"))
        lines += [f"  {key}: {va!r} -> {vb!r}" for key, va, vb in found]
    return "\n".join(lines)
