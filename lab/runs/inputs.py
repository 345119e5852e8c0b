"""What a notebook run depends on, as digests: ``make reports`` reuses an ``ok`` run whose
inputs are unchanged instead of running the notebook again.

A run's inputs are the notebook file, its effective parameters, the versions of every
installed distribution, and what its kernel actually used:

* every **project module** the kernel imported (each module in ``sys.modules`` whose file
  lies outside the Python installation: ``lab/...`` and any module of your own beside a
  notebook), with its sha256;
* every **data file** the kernel read through ``open`` (an audit hook sees each one), with
  its sha256; not counted: files inside the Python installation (their versions are in the
  dependencies), files the run itself wrote, the system's own files (``/proc``, ``/etc``,
  fonts, locales), Jupyter's and matplotlib's settings and caches, and JAX's compilation
  cache.

The kernel keeps this record itself (:mod:`lab.runs.kernel`, which also says which files
count as data) and writes it into the run folder; when the run ends, :func:`complete` digests
it all. Before running a notebook again, ``run_all`` digests *the same files as they are now*
(:func:`refresh`): if nothing differs the run is reused, so an edit to
``lab/causal/score.py`` re-runs the notebooks whose kernels imported it and no other. An edit
that makes a notebook import a new module also edits a module (or the notebook) it imported
before, so it is seen.

Not seen: files read by other programs the kernel starts (``espeak-ng``, ``sox``: the
speech data records their versions), the machine and its devices, and caches outside the
project (compiled programs, meta-training checkpoints), which change how long a run takes,
not what it computes. ``--force`` runs everything.
"""

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import lab

CODE_ROOT = Path(lab.__file__).parent
PROJECT_ROOT = CODE_ROOT.parent
MISSING = "missing"  # the digest of a file that is gone


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_digests: dict[tuple[str, int, int], str] = {}


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (``missing`` if it is gone), computed once per process for
    each path, size and modification time."""
    try:
        st = os.stat(path)
    except OSError:
        return MISSING
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _digests:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            return MISSING
        _digests[key] = h.hexdigest()
    return _digests[key]


def _key(path: str | Path) -> str:
    """A file's name in the record: relative to the project when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def _path(key: str) -> Path:
    return Path(key) if os.path.isabs(key) else PROJECT_ROOT / key


def dependency_versions() -> list[str]:
    """``name==version`` of every installed distribution, sorted (this project excluded:
    its modules are counted one by one)."""
    seen = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "lab":
            seen.add(f"{name}=={dist.version}")
    return sorted(seen)


_digests: dict[tuple, str] = {}


def dependencies_digest() -> str:
    """The digest of :func:`dependency_versions`, read again only when a folder on
    ``sys.path`` has changed since (an install or uninstall adds or removes its
    ``.dist-info`` there): reading every distribution's metadata takes about a second, once
    per run of a notebook otherwise."""
    key = tuple((entry, _mtime(entry)) for entry in sys.path)
    if key not in _digests:
        _digests.clear()
        _digests[key] = _sha("\n".join(dependency_versions()).encode())
    return _digests[key]


def _mtime(entry: str) -> int | None:
    try:
        return os.stat(entry or ".").st_mtime_ns
    except OSError:
        return None


def _digest_of(files: dict[str, str]) -> str:
    return _sha(json.dumps(files, sort_keys=True).encode())


def fingerprint(notebook: Path, parameters: dict[str, Any], *,
                dependencies: str | None = None) -> dict[str, Any]:
    """The digests of what a run's inputs are known before it starts: the notebook, its
    effective parameters and the installed versions (``dependencies`` may be passed in when
    many notebooks are fingerprinted at once). :func:`complete` adds the rest."""
    return {"notebook": _sha(Path(notebook).read_bytes()),
            "parameters": _sha(json.dumps(parameters, sort_keys=True, default=str).encode()),
            "dependencies": dependencies or dependencies_digest()}


RUN_RECORDS = {"metrics.json", "provenance.json", "inputs-used.json", "report.html",
               "partial.json", "reused.json", "imported.json"}


def is_run_record(key: str) -> bool:
    """A record of some run (``.../runs/<run>/metrics.json``, ``reused.json``...): what a
    compare view or a dashboard reads, never an input of a computation. Such files are
    dropped from the kernel's record and from older records when they are compared."""
    path = Path(key)
    return path.name in RUN_RECORDS and ("runs" in path.parts[:-1] or path.name in
                                         ("reused.json", "imported.json"))


RECORDER = {"lab/runs/kernel.py", "lab/runs/inputs.py"}  # they record, they compute nothing


def _counted(files: dict[str, str] | None) -> dict[str, str]:
    """The files that are inputs: neither a run's record nor the recorder's own modules
    (an edit to how runs are recorded re-runs no notebook)."""
    return {key: sha for key, sha in (files or {}).items()
            if not is_run_record(key) and key not in RECORDER}


def complete(start: dict[str, Any], used: dict[str, dict[str, str]] | None) -> dict[str, Any]:
    """``start`` (:func:`fingerprint`) with the modules and data files the kernel used
    (:func:`lab.runs.kernel.finish`, :func:`refresh`) and one ``digest`` over all of it;
    without ``used`` (a run that failed, or one recorded before the kernel kept this) there
    is no ``files``, and such a run is never reused."""
    parts = {k: start[k] for k in ("notebook", "parameters", "dependencies")}
    if not used:
        return parts
    files = {kind: _counted(used.get(kind)) for kind in ("modules", "data")}
    parts |= {kind: _digest_of(files[kind]) for kind in files}
    parts["digest"] = _sha(json.dumps(parts, sort_keys=True).encode())
    return parts | {"files": files}  # which files, each with its sha256


def refresh(old: dict[str, Any] | None) -> dict[str, dict[str, str]] | None:
    """The files a recorded run used, with their digests as they are now."""
    files = (old or {}).get("files")
    if not files:
        return None
    return {kind: {key: file_digest(_path(key)) for key in _counted(files.get(kind))}
            for kind in ("modules", "data")}


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs between a run's recorded inputs ``old`` and ``new`` (its inputs now:
    :func:`complete` of :func:`refresh`): the parts by name, and each module and data file
    that changed. Compared file by file, so a record stays comparable when the rule of what
    counts (:func:`is_run_record`) changes. Empty: the run can be reused."""
    if not old or not old.get("files"):
        return ["no record of the modules and data it used" if old else
                "no record of the inputs"]
    names = [part for part in ("notebook", "parameters", "dependencies")
             if old.get(part) != new.get(part)]
    for kind in ("modules", "data"):
        before, now = _counted(old["files"].get(kind)), (new.get("files") or {}).get(kind, {})
        names += [f"{key}" + (" (gone)" if now.get(key) == MISSING else "")
                  for key in sorted(before) if before[key] != now.get(key)]
    return names
