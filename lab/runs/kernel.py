"""What a notebook's kernel records about itself under ``python -m lab run``: the project
modules it imported and the data files it read (the inputs that decide when ``make
reports`` runs the notebook again: :mod:`lab.runs.inputs`), and where its time went.

The runner puts two cells, tagged ``lab-inputs`` and left out of the report and of the
notebook it keeps, around the notebook's own: the first calls :func:`start`, the last
:func:`finish`, which writes ``inputs-used.json`` into the run folder:

* ``modules``: each module in ``sys.modules`` whose file lies outside the Python
  installation (``lab/...`` and any module of your own beside a notebook), with its sha256;
* ``data``: each regular file the process read through ``open`` (an audit hook sees every
  one) and did not write, with its sha256; not counted: files inside the Python installation
  (their versions are in the dependencies), the system's own files (``/proc``, ``/etc``,
  fonts, locales), Jupyter's, IPython's and matplotlib's settings and caches (``~/.cache``
  but lab's data cache), JAX's compilation cache, lab's checkpoints (resumable state: they
  change how long a run takes, not what it computes), the run folder, and the records of
  other runs that a compare view reads (``lab.runs.inputs.is_run_record``). Runs the notebook
  starts itself (a sweep's trials, in ``<run>/sweeps/``) add their modules, data and
  notebooks;
* ``devices``: the JAX devices this kernel's ``jax`` sees (``"cpu:0 cpu"``,
  ``"cuda:0 NVIDIA H100 80GB HBM3"``; none when the notebook never imported jax): the run's
  record says what the computation ran on, without a process of its own to ask;
* ``time``: wall and CPU seconds since :func:`start`; JAX's tracing, lowering and XLA
  compilation seconds (``jax.monitoring``; a program loaded from the compilation cache counts
  its load), with each compiled program's name, count and seconds (``compiled``); and a
  sample every 20 ms of what the kernel's main thread is doing
  (:func:`classify`): ``compile`` (JAX tracing, lowering or compiling), ``native`` (inside
  one call into native code since the sample before: an XLA program running or awaited,
  numpy, I/O) or ``python`` (running Python bytecode). The shares are of the kernel's wall
  time; XLA's other threads and GA3C's worker threads show in the CPU seconds, not here.

Not seen: files read by other programs the kernel starts (``espeak-ng``, ``sox``: the speech
data records their versions).
"""

import json
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

from lab.runs.inputs import PROJECT_ROOT, _key, file_digest, is_run_record

USED_FILE = "inputs-used.json"  # written by the kernel into its run folder
TAG = "lab-inputs"  # the two cells the runner adds (left out of the report)
START_CELL = ("# Recorded by `python -m lab run`: the project modules this kernel imports\n"
              "# and the data files it reads decide when `make reports` runs it again.\n"
              "import lab.runs.kernel\n\nlab.runs.kernel.start()")
FINISH_CELL = ("# Recorded by `python -m lab run` (see the first cell)\n"
               "lab.runs.kernel.finish()")


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
    from lab.train.checkpoint import default_dir  # resumable state: how long, not what

    never = tuple(os.path.realpath(os.environ[name]) + os.sep
                  for name in ("JAX_COMPILATION_CACHE_DIR", "MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR")
                  if os.environ.get(name)) + (os.path.realpath(default_dir()) + os.sep,)
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
_programs: dict[str, list[float]] = {}  # XLA compilations by program name: [count, seconds]
_COMPILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
                   "/jax/core/compile/backend_compile_duration": "xla_compile_s"}
_clock: dict[str, float] = {}
_samples = {"compile": 0, "native": 0, "python": 0}
SAMPLE_EVERY = 0.02  # seconds between two looks at the main thread

# a main-thread stack that holds one of these JAX files is tracing, lowering or compiling
_COMPILING = ("jax/_src/compiler.py", "jax/_src/interpreters/mlir.py",
              "jax/_src/interpreters/partial_eval.py", "jax/_src/linear_util.py")


def _on_duration(event: str, duration: float, fun_name: str = "?", **_: Any) -> None:
    name = _COMPILE_EVENTS.get(event)
    if name:
        _compile[name] += duration
        _compile["compiles"] += name == "xla_compile_s"
        if name == "xla_compile_s":
            program = _programs.setdefault(str(fun_name), [0, 0.0])
            program[0] += 1
            program[1] += duration


def compiled_programs() -> list[dict[str, Any]]:
    """The XLA compilations since :func:`start` by program name (JAX's, e.g.
    ``jit(train)``), the most seconds first: ``{"name", "count", "seconds"}``. A name counted
    more than once was compiled again: other shapes or static arguments, a new closure or
    ``jit`` wrapper around the same function, or a program loaded again from the cache."""
    return [{"name": k, "count": int(n), "seconds": round(t, 3)}
            for k, (n, t) in sorted(_programs.items(), key=lambda kv: -kv[1][1])]


def classify(frame, before: tuple | None) -> tuple[str, tuple]:
    """What the main thread does, from its innermost frame now and the ``(frame id,
    instruction)`` it was at one sample before: ``compile`` when JAX's tracing, lowering or
    compiling is on its stack; ``native`` when it is still at the same instruction of the
    same frame, that is inside one call into native code (an XLA program running: on the
    CPU a jitted call runs on the calling thread; waiting for one; numpy; I/O); otherwise
    ``python``. Returns the kind and the position to pass next time."""
    here = (id(frame), frame.f_lasti)
    outer = frame
    while outer is not None:
        if outer.f_code.co_filename.replace(os.sep, "/").endswith(_COMPILING):
            return "compile", here
        outer = outer.f_back
    return ("native" if here == before else "python"), here


def _sample(main: int) -> None:
    before = None
    while True:
        time.sleep(SAMPLE_EVERY)
        frame = sys._current_frames().get(main)
        if frame is None:
            return
        kind, before = classify(frame, before)
        _samples[kind] += 1
        del frame


def start() -> None:
    """Begin recording the files this process reads, the seconds JAX spends compiling and
    what the main thread does (the runner's first cell). Importing jax here is safe for the
    notebooks that set ``XLA_FLAGS`` in their own first cell: XLA reads it when the first
    device is made."""
    global _recording
    if _recording:
        return
    sys.addaudithook(_hook)  # hooks cannot be removed: installed once per process
    _recording = True
    _clock.update(wall=time.perf_counter(), cpu=time.process_time())
    threading.Thread(target=_sample, args=(threading.main_thread().ident,), daemon=True,
                     name="lab-kernel-sampler").start()
    try:
        import jax.monitoring
    except ImportError:
        return
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def kernel_time() -> dict[str, float]:
    """Seconds since :func:`start` (module doc): wall, CPU (every thread), JAX's tracing,
    lowering and XLA compilation, and the main thread's samples as shares of the wall."""
    if not _clock:
        return {}
    total = sum(_samples.values()) or 1
    return {"wall_s": round(time.perf_counter() - _clock["wall"], 2),
            "cpu_s": round(time.process_time() - _clock["cpu"], 2)} | {
        k: round(v, 2) for k, v in _compile.items()} | {
        f"{k}_share": round(v / total, 3) for k, v in _samples.items()}


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
    modules = set(imported_modules())  # after _not_data's imports: their sources are read too
    files = set()
    for path in _read - _written:
        real = os.path.realpath(path)
        if (real in modules or real.endswith((".pyc", ".pth")) or real.startswith(never)
                or is_run_record(real)
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
            # its own record, and a resumed run's earlier attempts (lab.runs.runner.ATTEMPTS)
            if prov.parent == Path(run_folder) or "attempts" in prov.relative_to(
                    run_folder).parts[:1]:
                continue
            try:
                nested = json.loads(prov.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            inputs = nested.get("inputs") or {}
            files = inputs.get("files") or {}
            modules |= files.get("modules") or {}
            data |= files.get("data") or {}
            if nested.get("notebook_path") and inputs.get("notebook"):
                notebook = Path(nested["notebook_path"])
                notebook = notebook if notebook.is_absolute() else PROJECT_ROOT / notebook
                data[_key(notebook.resolve())] = inputs["notebook"]
    return {"modules": dict(sorted(modules.items())), "data": dict(sorted(data.items()))}


def devices() -> list[str]:
    """The JAX devices of this process, ``"<platform>:<id> <kind>"`` each; none when jax was
    never imported here (the notebook computed nothing with JAX)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return []
    return [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()]


def finish() -> None:
    """Write what this kernel used, and its time, into its run folder (the runner's last
    cell). A failure here is printed, never raised: the run is then simply not reused."""
    from lab.runs.records import run_dir

    folder = run_dir()
    try:
        record = used(folder) | {"time": kernel_time(), "compiled": compiled_programs(),
                                 "devices": devices()}
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
