"""What a notebook run depends on, as digests: ``make reports`` reuses an ``ok`` run whose
inputs are unchanged instead of running the notebook again.

The inputs are the notebook file, its resolved parameters, the code of the ``lab`` package
(every file under ``lab/`` but caches) and the versions of every installed distribution.
Not included: data files (checked by sha256 where they are loaded), the machine and its
devices, and caches outside the project (compiled programs, meta-training checkpoints),
which change how long a run takes, not what it computes. ``--force`` runs everything.
"""

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import lab

CODE_ROOT = Path(lab.__file__).parent
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_digest(root: Path = CODE_ROOT) -> str:
    """One digest of every file's path and bytes under ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (not path.is_file() or _SKIP_DIRS & set(rel.parts)
                or path.suffix in _SKIP_SUFFIXES):
            continue
        h.update(str(rel).encode() + b"\0" + _sha(path.read_bytes()).encode() + b"\n")
    return h.hexdigest()


def dependency_versions() -> list[str]:
    """``name==version`` of every installed distribution, sorted (this project excluded:
    its code is in :func:`code_digest`)."""
    seen = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "lab":
            seen.add(f"{name}=={dist.version}")
    return sorted(seen)


def dependencies_digest() -> str:
    return _sha("\n".join(dependency_versions()).encode())


def fingerprint(notebook: Path, parameters: dict[str, Any], *, code: str | None = None,
                dependencies: str | None = None) -> dict[str, str]:
    """The digests of a run's inputs and one ``digest`` over all of them. ``code`` and
    ``dependencies`` may be passed in when many notebooks are fingerprinted at once."""
    parts = {
        "notebook": _sha(Path(notebook).read_bytes()),
        "parameters": _sha(json.dumps(parameters, sort_keys=True, default=str).encode()),
        "code": code or code_digest(),
        "dependencies": dependencies or dependencies_digest(),
    }
    parts["digest"] = _sha(json.dumps(parts, sort_keys=True).encode())
    return parts


def changed(old: dict[str, str] | None, new: dict[str, str]) -> list[str]:
    """Which inputs differ between two fingerprints (all of them if ``old`` has none)."""
    if not old:
        return ["no record of the inputs"]
    return [k for k in ("notebook", "parameters", "code", "dependencies") if old.get(k) != new[k]]
