"""Check a run's verdicts against its own numbers, and re-derive old records' claims.

- :func:`verify`: every claim of a run's ``metrics.json`` decided again by the shared rule
  (``lab.runs.verdict``) from what the file records (declarations and per-unit values),
  and compared: ``python -m lab claims verify RUN_OR_RESULTS_DIR...``.
- :func:`rederive`: a recorded run (``results/``) decided again under its experiment's
  current declarations, from the per-unit numbers the run recorded, without re-running it:
  the experiment module's ``rederive(metrics, parameters)`` gives the new claims. The
  claims as first recorded stay in ``metrics.json`` under ``claims_as_recorded``, with
  when and at which commit they were re-derived (``claims_rederived``).

The experiment module is the one the notebook's metadata names (``lab.validate``), found by
name at run time as the runner finds it (``lab.runs.params``).
"""

import contextlib
import importlib
import io
import json
from pathlib import Path
from typing import Any

from lab.runs.verdict import mismatches, unfilled

METRICS, PROVENANCE = "metrics.json", "provenance.json"


def run_folders(paths: list[Path]) -> list[Path]:
    """The run folders (each with a ``metrics.json``) at or directly under ``paths``, and
    under a reports folder's ``runs/``."""
    out = []
    for path in paths:
        if (path / METRICS).is_file():
            out.append(path)
            continue
        for parent in (path, path / "runs"):
            out += sorted(p.parent for p in parent.glob(f"*/{METRICS}"))
    return out


def verify(folder: Path) -> list[str]:
    """The problems (one line each) :func:`check` finds in ``folder``; [] when every verdict
    is reproduced and every claim quotes its paper."""
    wrong, unquoted = check(folder)
    return wrong + unquoted


def check(folder: Path) -> tuple[list[str], list[str]]:
    """``(mismatches, unquoted)``: the lines where ``folder``'s recorded verdicts differ from
    the rule applied again to its recorded numbers, and those of claims whose paper's words
    are still the placeholder of ``python -m lab new``."""
    metrics = json.loads((folder / METRICS).read_text())
    claims = [c for c in metrics.get("claims") or [] if isinstance(c, dict)]
    return mismatches(claims), unfilled(claims)


def experiment_module(notebook: Path):
    """The experiment module a notebook's metadata names (``{"lab": {"validate":
    "module:function"}}``)."""
    meta = json.loads(notebook.read_text()).get("metadata", {}).get("lab", {})
    if "validate" not in meta:
        raise ValueError(f"{notebook} names no experiment module (metadata lab.validate)")
    return importlib.import_module(meta["validate"].split(":")[0])


def rederive(folder: Path, project: Path, *, when: str, commit: str) -> tuple[list, list]:
    """Re-derive ``folder``'s claims in place; returns ``(before, after)``: the claims'
    ``(name, verdict)`` as recorded and as re-derived."""
    metrics = json.loads((folder / METRICS).read_text())
    provenance = json.loads((folder / PROVENANCE).read_text())
    notebook = project / "notebooks" / provenance["notebook"]
    module = experiment_module(notebook)
    if not hasattr(module, "rederive"):
        raise ValueError(f"{module.__name__} has no rederive(metrics, parameters)")
    recorded = metrics.get("claims_as_recorded", metrics.get("claims") or [])
    with contextlib.redirect_stdout(io.StringIO()):  # configure's notes on presets
        entries = module.rederive(dict(metrics), dict(provenance.get("parameters") or {}))
    metrics |= {"claims": entries["claims"], "claims_as_recorded": recorded,
                "claims_rederived": {"date": when, "commit": commit}}
    tmp = folder / f".{METRICS}.tmp"
    tmp.write_text(json.dumps(metrics, indent=1, sort_keys=True, default=_plain))
    tmp.replace(folder / METRICS)
    return ([(c.get("name"), c.get("verdict")) for c in recorded],
            [(c["name"], c["verdict"]) for c in entries["claims"]])


def _plain(x: Any):
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON")
