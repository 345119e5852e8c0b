"""Bring run folders made on other machines into ``reports/runs``.

    python -m lab import results/*                   # the recorded runs shipped in results/
    python -m lab import ~/from-gpu/03_sac_ae-20261201-101500-1a2b3c4d [--out reports]

Each folder is a run folder as the runner writes it (``lab.runs.runner``); only its
``provenance.json`` and ``metrics.json`` are needed. Every folder is checked before anything
is written: both files parse as JSON objects; the provenance names the notebook (``.ipynb``),
a finished status (ok, failed, interrupted, pruned: never running), the start time (ISO), the
parameters and the git commit; the claims in the metrics, if any, each have a name, a
statement and a verdict the reports know. One problem refuses the whole import with one line
(:class:`ImportRefused`: the folder, the problem, the fix), and nothing under ``reports/``
changes.

An imported run is ``reports/runs/<the folder's name>/``: ``provenance.json`` and
``metrics.json`` copied byte for byte (and ``report.html``, the executed notebook and
``figures/`` when the folder has them), plus ``imported.json``,
``{"imported_from": <absolute source path>, "imported_at": <UTC time>}``, which the index
and the claims dashboard show as "recorded". Each folder is copied into a hidden folder in
``reports/runs`` and renamed into place, so the reports never see half a run. A folder whose
records are already there byte for byte is skipped (``make reports`` imports ``results/``
every time); another run under the same name is refused. Afterwards the index and the
claims dashboard are rebuilt.
"""

import json
import os
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from lab.runs.claims import VERDICTS
from lab.runs.provenance import now
from lab.runs.records import METRICS_FILE
from lab.runs.report import IMPORTED_FILE, PROVENANCE_FILE, REPORT_FILE, build_index
from lab.runs.verdict import mismatches

FINISHED = ("ok", "failed", "interrupted", "pruned")  # the runner's statuses, but running
RECORDS = (PROVENANCE_FILE, METRICS_FILE)
FIGURES = "figures"


class ImportRefused(ValueError):
    """A run folder cannot be imported; the message, one line, names the folder, the
    problem and the fix. Nothing was written."""


def _refused(folder: Path, problem: str, fix: str) -> ImportRefused:
    return ImportRefused(" ".join(f"{folder}: {problem}; {fix}".split()))


def _read_object(folder: Path, name: str) -> dict[str, Any]:
    path = folder / name
    if not path.is_file():
        raise _refused(folder, f"no {name}", "a run folder needs the provenance.json and "
                       "metrics.json its runner wrote; copy the whole folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        where = f" at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        raise _refused(folder, f"{name} is not valid JSON{where}",
                       "copy it again from the machine that made the run") from None
    if not isinstance(data, dict):
        raise _refused(folder, f"{name} holds a {type(data).__name__}, not a JSON object",
                       "import a run folder the runner wrote")
    return data


def _check_provenance(folder: Path, run: dict[str, Any]) -> None:
    notebook = run.get("notebook")
    if not (isinstance(notebook, str) and notebook.endswith(".ipynb")
            and Path(notebook).name == notebook):
        raise _refused(folder, f"provenance.json names no notebook (notebook: {notebook!r})",
                       "import a run folder the runner wrote")
    status = run.get("status")
    if status == "running":
        raise _refused(folder, "the run has not finished (status running): it is still "
                       "running, or its runner was killed", "import it once it has ended")
    if status not in FINISHED:
        raise _refused(folder, f"status {status!r} is not one of {', '.join(FINISHED)}",
                       "import a run folder the runner finished")
    try:
        datetime.fromisoformat(run.get("started"))
    except (TypeError, ValueError):
        raise _refused(folder, f"started {run.get('started')!r} is not an ISO time",
                       "import a run folder the runner wrote") from None
    if not isinstance(run.get("parameters"), dict):
        raise _refused(folder, "provenance.json has no parameters",
                       "import a run folder the runner wrote")
    git = run.get("git")
    if not (isinstance(git, dict) and isinstance(git.get("commit"), str) and git["commit"]):
        raise _refused(folder, "provenance.json names no git commit",
                       "run the notebook from a git checkout of the workbench, then import "
                       "that run")


def _check_claims(folder: Path, metrics: dict[str, Any]) -> None:
    claims = metrics.get("claims", [])
    if not isinstance(claims, list):
        raise _refused(folder, "the claims in metrics.json are not a list",
                       "record them with lab.runs.claims.summary")
    for i, claim in enumerate(claims):
        if not (isinstance(claim, dict) and isinstance(claim.get("name"), str)
                and isinstance(claim.get("statement"), str)):
            raise _refused(folder, f"claim {i} in metrics.json has no name or statement",
                           "record claims with lab.runs.claims.summary")
        if claim.get("verdict") not in VERDICTS:
            raise _refused(folder, f"claim {claim['name']!r} has verdict "
                           f"{claim.get('verdict')!r}, not one of {', '.join(VERDICTS)}",
                           "record claims with lab.runs.claims.summary")
    problems = mismatches(claims)
    if problems:
        raise _refused(folder, f"its verdicts do not follow from its numbers by the shared "
                       f"rule ({problems[0]})", "re-derive it: python -m lab claims rederive "
                       f"{folder}")


def _same_records(a: Path, b: Path) -> bool:
    return all((b / name).is_file() and (a / name).read_bytes() == (b / name).read_bytes()
               for name in RECORDS)


def check(folders: list[Path], out: Path) -> list[tuple[Path, Path, dict[str, Any]]]:
    """What :func:`import_runs` will copy, ``(source, destination, provenance)``, once every
    folder passed the checks (see the module doc); raises :class:`ImportRefused` at the
    first problem. Folders already imported with the same records are left out."""
    todo, taken = [], {}
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            raise _refused(folder, "not a folder", "pass run folders (reports/runs/<run>)")
        name = folder.resolve().name
        if name.startswith("."):
            raise _refused(folder, "a hidden folder name (the importer's temporary folders "
                           "start with a dot)", "rename the folder")
        run = _read_object(folder, PROVENANCE_FILE)
        metrics = _read_object(folder, METRICS_FILE)
        _check_provenance(folder, run)
        _check_claims(folder, metrics)
        destination = out / "runs" / name
        for other in (taken.get(name), destination):
            if other is not None and other.exists() and not _same_records(folder, other):
                raise _refused(folder, f"another run is already named {name} ({other})",
                               "rename this folder before importing it, or remove the other "
                               "one if it is an older copy")
        if name not in taken and not destination.exists():
            todo.append((folder, destination, run))
        taken[name] = folder
    return todo


def _copy(source: Path, destination: Path, run: dict[str, Any]) -> None:
    """Copy one run into a hidden folder next to ``destination``, then rename it there."""
    tmp = destination.with_name(f".import-{destination.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an import that was killed
    tmp.mkdir()
    try:
        for name in RECORDS:
            shutil.copyfile(source / name, tmp / name)
        for name in (REPORT_FILE, run["notebook"]):
            if (source / name).is_file():
                shutil.copyfile(source / name, tmp / name)
        if (source / FIGURES).is_dir():
            shutil.copytree(source / FIGURES, tmp / FIGURES)
        if not (tmp / REPORT_FILE).exists():  # a record alone: a page a reader can open
            from lab.runs.record_report import render

            try:
                render(tmp)
            except Exception as err:  # noqa: BLE001 - the record is what counts; say so
                print(f"warning: no page rendered for {source.name} ({type(err).__name__}: "
                      f"{err}); its card links metrics.json", file=sys.stderr)
        (tmp / IMPORTED_FILE).write_text(json.dumps(
            {"imported_from": str(source.resolve()), "imported_at": now()}, indent=2))
        tmp.rename(destination)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def import_runs(folders: list[str | Path], out: str | Path = "reports") -> list[Path]:
    """Import run folders made elsewhere into ``out/runs`` (see the module doc) and rebuild
    the index; returns the folders imported, not those already there. Raises
    :class:`ImportRefused`, having written nothing, when any folder fails its checks."""
    out = Path(out)
    todo = check([Path(f) for f in folders], out)
    if not todo:
        return []
    (out / "runs").mkdir(parents=True, exist_ok=True)
    for source, destination, run in todo:
        _copy(source, destination, run)
    build_index(out)
    return [destination for _, destination, _ in todo]
