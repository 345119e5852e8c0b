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

The kernel keeps this record itself: the runner puts a first cell in the prepared notebook
that starts it (:func:`start`) and a last one that writes ``inputs-used.json`` into the run
folder (:func:`finish`); both are tagged ``lab-inputs`` and left out of the report. Runs a
notebook starts itself (a sweep's trials in ``<run>/sweeps/``) add their modules, data and
notebooks to it. When the run ends, :func:`fingerprint` digests it all. Before running a
notebook again, ``run_all`` digests *the same files as they are now* (:func:`refresh`): if
nothing differs the run is reused, so an edit to ``lab/causal/score.py`` re-runs the
notebooks whose kernels imported it and no other. An edit that makes a notebook import a
new module also edits a module (or the notebook) it imported before, so it is seen.

Not seen: files read by other programs the kernel starts (``espeak-ng``, ``sox``: the
speech data records their versions), the machine and its devices, and caches outside the
project (compiled programs, meta-training checkpoints), which change how long a run takes,
not what it computes. ``--force`` runs everything.
"""

import hashlib
import json
import os
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import lab

CODE_ROOT = Path(lab.__file__).parent
PROJECT_ROOT = CODE_ROOT.parent
USED_FILE = "inputs-used.json"  # written by the kernel into its run folder
TAG = "lab-inputs"  # the two cells the runner adds (left out of the report)
MISSING = "missing"  # the digest of a file that is gone
PARTS = ("notebook", "parameters", "modules", "data", "dependencies")

START_CELL = ("# Recorded by `python -m lab run`: the project modules this kernel imports\n"
              "# and the data files it reads decide when `make reports` runs it again.\n"
              "import lab.runs.inputs\n\nlab.runs.inputs.start()")
FINISH_CELL = ("# Recorded by `python -m lab run` (see the first cell)\n"
               "lab.runs.inputs.finish()")


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


def _installation() -> tuple[str, ...]:
    """Folders of the Python installation: their files are versioned dependencies."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(p) + os.sep for p in paths if p)


def _home(*parts: str) -> str:
    return os.path.join(os.path.expanduser("~"), *parts) + os.sep


def _not_data() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Folders whose files are never a run's data (see the module doc): ``(never, keep,
    skip)``; a file under ``keep`` (lab's data cache) is data even inside ``skip``."""
    from lab.data.download import data_dir

    never = tuple(os.path.realpath(os.environ[name]) + os.sep
                  for name in ("JAX_COMPILATION_CACHE_DIR", "MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR")
                  if os.environ.get(name))
    cache = os.environ.get("XDG_CACHE_HOME") or _home(".cache")
    skip = (*_installation(), "/proc/", "/sys/", "/dev/", "/etc/", "/run/", "/var/",
            "/usr/share/fonts/", "/usr/share/zoneinfo/", "/usr/share/locale/",
            "/usr/lib/locale/", "/usr/share/mime/", _home(".ipython"), _home(".jupyter"),
            _home(".config"), _home(".local", "share", "jupyter"),
            os.path.realpath(cache) + os.sep)
    return never, (os.path.realpath(data_dir()) + os.sep,), skip


_read: set[str] = set()
_written: set[str] = set()
_recording = False
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _recording:
        return
    try:
        path, mode, flags = args
        if isinstance(path, int):
            return
        path = os.path.abspath(os.fsdecode(path))
        writes = (any(c in mode for c in "wax+") if isinstance(mode, str)
                  else bool((flags or 0) & _WRITE_FLAGS))
        (_written if writes else _read).add(path)
    except Exception:  # an audit hook must never break the call it watches
        pass


_compile = {"trace_s": 0.0, "lower_s": 0.0, "xla_compile_s": 0.0, "compiles": 0}
_COMPILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
                   "/jax/core/compile/backend_compile_duration": "xla_compile_s"}
_clock: dict[str, float] = {}


def _on_duration(event: str, duration: float, **_: Any) -> None:
    name = _COMPILE_EVENTS.get(event)
    if name:
        _compile[name] += duration
        _compile["compiles"] += name == "xla_compile_s"


def start() -> None:
    """Begin recording the files this process reads and the seconds JAX spends compiling
    (the runner's first cell). Importing jax here is safe for the notebooks that set
    ``XLA_FLAGS`` in their own first cell: XLA reads it when the first device is made."""
    global _recording
    if _recording:
        return
    sys.addaudithook(_hook)  # hooks cannot be removed: installed once per process
    _recording = True
    _clock.update(wall=time.perf_counter(), cpu=time.process_time())
    try:
        import jax.monitoring
    except ImportError:
        return
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def kernel_time() -> dict[str, float]:
    """Seconds since :func:`start`: wall, CPU (every thread), and JAX's tracing, lowering
    and XLA compilation (a program read from the compilation cache counts its load)."""
    if not _clock:
        return {}
    return {"wall_s": round(time.perf_counter() - _clock["wall"], 2),
            "cpu_s": round(time.process_time() - _clock["cpu"], 2)} | {
        k: round(v, 2) for k, v in _compile.items()}


def _key(path: str | Path) -> str:
    """A file's name in the record: relative to the project when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def _path(key: str) -> Path:
    return Path(key) if os.path.isabs(key) else PROJECT_ROOT / key


def imported_modules() -> list[str]:
    """Files of the modules in ``sys.modules`` that are not part of the installation."""
    installed = _installation()
    files = set()
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not name:
            continue
        path = os.path.realpath(name)
        if os.path.isfile(path) and not path.startswith(installed):
            files.add(path)
    return sorted(files)


def data_files(run_folder: Path | None = None) -> list[str]:
    """Regular files this process read since :func:`start`, less those it wrote and
    those that are never data (module doc)."""
    never, keep, skip = _not_data()
    never += (os.path.realpath(run_folder) + os.sep,) if run_folder else ()
    modules = set(imported_modules())
    files = set()
    for path in _read - _written:
        real = os.path.realpath(path)
        if (real in modules or real.endswith((".pyc", ".pth")) or real.startswith(never)
                or (real.startswith(skip) and not real.startswith(keep))
                or not os.path.isfile(real)):
            continue
        files.add(real)
    return sorted(files)


def used(run_folder: Path | None = None) -> dict[str, dict[str, str]]:
    """``{"modules": {file: sha256}, "data": {file: sha256}}`` for this process, with the
    modules, data and notebooks of the runs recorded below ``run_folder`` (a sweep's)."""
    modules = {_key(p): file_digest(p) for p in imported_modules()}
    data = {_key(p): file_digest(p) for p in data_files(run_folder)}
    if run_folder is not None:
        for prov in Path(run_folder).rglob("provenance.json"):
            if prov.parent == Path(run_folder):
                continue
            try:
                nested = json.loads(prov.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            inputs = nested.get("inputs") or {}
            modules |= inputs.get("modules") or {}
            data |= inputs.get("data") or {}
            if nested.get("notebook_path") and inputs.get("notebook"):
                data[_key(Path(nested["notebook_path"]).resolve())] = inputs["notebook"]
    return {"modules": dict(sorted(modules.items())), "data": dict(sorted(data.items()))}


def finish() -> None:
    """Write what this kernel used, and its time, into its run folder (the runner's last
    cell). A failure here is printed, never raised: the run is then simply not reused."""
    from lab.runs.records import run_dir

    folder = run_dir()
    try:
        record = used(folder) | {"time": kernel_time()}
        if folder is not None:
            tmp = folder / f".{USED_FILE}.tmp"
            tmp.write_text(json.dumps(record, indent=1))
            tmp.replace(folder / USED_FILE)
    except Exception as err:  # noqa: BLE001
        print(f"could not record this run's inputs ({type(err).__name__}: {err}); "
              "`make reports` will run it again next time")


def read_used(run_folder: Path) -> dict[str, dict[str, str]] | None:
    try:
        record = json.loads((Path(run_folder) / USED_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record.get("modules"), dict) else None


def dependency_versions() -> list[str]:
    """``name==version`` of every installed distribution, sorted (this project excluded:
    its modules are counted one by one)."""
    seen = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "lab":
            seen.add(f"{name}=={dist.version}")
    return sorted(seen)


def dependencies_digest() -> str:
    return _sha("\n".join(dependency_versions()).encode())


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


def complete(start: dict[str, Any], used: dict[str, dict[str, str]] | None) -> dict[str, Any]:
    """``start`` (:func:`fingerprint`) with the modules and data files the kernel used
    (:func:`finish`, :func:`refresh`) and one ``digest`` over all of it; without ``used``
    (a run that failed, or one recorded before the kernel kept this) there is no digest,
    and such a run is never reused."""
    parts = {k: start[k] for k in ("notebook", "parameters", "dependencies")}
    if not used:
        return parts
    files = {kind: dict(used.get(kind) or {}) for kind in ("modules", "data")}
    parts |= {kind: _digest_of(files[kind]) for kind in files}
    parts["digest"] = _sha(json.dumps(parts, sort_keys=True).encode())
    return parts | {"files": files}  # which files, each with its sha256


def refresh(old: dict[str, Any] | None) -> dict[str, dict[str, str]] | None:
    """The files a recorded run used, with their digests as they are now."""
    files = (old or {}).get("files")
    if not files:
        return None
    return {kind: {key: file_digest(_path(key)) for key in files.get(kind, {})}
            for kind in ("modules", "data")}


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs between a run's recorded inputs and ``new`` (its inputs now, from the
    files it used): the parts, and by name the modules and data files that changed."""
    if not old or "digest" not in old:
        return ["no record of the modules and data it used" if old else
                "no record of the inputs"]
    names = []
    for part in PARTS:
        if old.get(part) == new.get(part):
            continue
        if part in ("modules", "data"):
            before, now = old["files"][part], new["files"][part]
            names += [f"{key}" + (" (gone)" if now.get(key) == MISSING else "")
                      for key in sorted(before) if before[key] != now.get(key)]
        else:
            names.append(part)
    return names
