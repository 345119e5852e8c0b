"""Run notebooks through papermill and keep a record of every run.

``run_notebook`` resolves the parameters first (notebook default < preset < explicit value,
``lab.runs.params``; a bad value fails in milliseconds, before any kernel starts, and
writes nothing) and checks the output directory, then gives the run its own directory under
``<out>/runs/``, where papermill executes the prepared notebook (:func:`prepare`: the
effective values injected):

    <notebook>-<UTC time stamp>-<parameter hash>/
        <notebook>.ipynb   the executed notebook
        report.html        its HTML report (lab template, run header, figures inline)
        provenance.json    effective parameters and their sources, preset, seed, git,
                           versions, devices, the kernel's variables, host, times, status,
                           the inputs' digests and the kernel's time
        inputs-used.json   the modules and data files the kernel used (lab.runs.kernel)
        metrics.json       whatever the notebook passed to ``lab.experiments.record``
        figures/*.png      every PNG the notebook displayed

and refreshes ``<out>/<notebook>.html`` (the latest report), ``<out>/index.html`` and
``<out>/claims.html`` (every notebook's claims; ``lab.runs.report``).
A notebook that raises, a cell timeout and a dead kernel all give status ``failed``
with the error at the top of the report; Ctrl-C gives ``interrupted``; a sweep's trial that
its pruner stopped early (it records ``pruned_at_phase``) gives ``pruned``. Either way
everything written so far is kept.

``run_all`` (``make reports``; ``--preset NAME``: every notebook that has that preset) runs a
notebook only when its inputs changed since its last ``ok`` run with the same parameters
(``lab.runs.inputs``: the notebook, its parameters, the installed versions, and the project
modules and data files its kernel used, which the kernel records itself:
``lab.runs.kernel``); otherwise it reuses that run and the index says so. ``force=True``
(``--force``) runs everything. ``jobs=N`` (``--jobs N``) runs up to N notebooks at once, each
in a worker process of its own, its kernel limited to its share of the cores
(:func:`kernel_environment`); a notebook whose experiment declares a timing claim runs with
no other kernel beside it, on every core (:func:`times_its_claims`; provenance.json records
``alone``), so that its timing verdicts do not depend on ``--jobs``. Every kernel uses JAX's
persistent compilation cache (:func:`compile_cache_dir`) and talks to the runner over Unix
sockets (:class:`IPCKernelManager`), not TCP ports.
"""

import atexit
import base64
import functools
import hashlib
import html
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import nbformat
import papermill
from jupyter_client.manager import AsyncKernelManager
from papermill.exceptions import PapermillExecutionError
from traitlets import CaselessStrEnum, default

from lab.lazy import skip_iri_grammar
from lab.runs import kernel as run_kernel
from lab.runs.inputs import changed, complete, dependencies_digest, fingerprint, refresh
from lab.runs.params import Resolution, notebook_presets, resolve
from lab.runs.provenance import collect, jax_devices, now
from lab.runs.records import METRICS_FILE, RUN_DIR_ENV, read_metrics
from lab.runs.rederive import experiment_module
from lab.runs.report import (
    PROVENANCE_FILE,
    REPORT_FILE,
    REUSED_FILE,
    build_index,
    export_html,
    load_runs,
    strip_ansi,
)

KERNEL_NAME = "lab"
DEFAULT_CELL_TIMEOUT = 1800  # seconds one cell of a default run may take
PRESET_CELL_TIMEOUT = 6 * 3600  # ... and of a named preset (claim runs: an hour in one cell)
OK, FAILED, INTERRUPTED, RUNNING = "ok", "failed", "interrupted", "running"
DEFAULT_JOBS = 2  # notebooks at once for `--all` and `make reports` (benchmarks/RESULTS.md)
PRUNED = "pruned"  # a sweep's trial the pruner stopped early (lab.sweeps.phases)


class RunnerError(RuntimeError):
    """The run cannot start; the message says what to change."""


@dataclass
class RunResult:
    notebook: Path
    run_dir: Path
    status: str
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    reused: bool = False  # an earlier run with the same inputs, not run again

    @property
    def report(self) -> Path:
        return self.run_dir / REPORT_FILE


def ensure_kernel() -> str:
    """Make the Jupyter kernel ``lab`` run this very interpreter, and return its name.

    Papermill starts the kernel named in the notebook; if that name points at another
    Python, the run silently uses another environment. The runner therefore always names
    ``lab`` and (re)registers it inside ``sys.prefix`` when it is missing or stale (inside
    ``$LAB_KERNEL_PREFIX`` where that is set: an offline bundle's, whose packages sit in a
    ``--target`` folder beside a Python whose prefix may not be writable; that prefix's
    ``share/jupyter`` must then be on ``JUPYTER_PATH``).
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def current() -> str | None:
        try:
            return KernelSpecManager().get_kernel_spec(KERNEL_NAME).argv[0]
        except NoSuchKernel:
            return None

    if current() != sys.executable:
        from ipykernel.kernelspec import install

        install(kernel_name=KERNEL_NAME, display_name="Python (lab)",
                prefix=os.environ.get("LAB_KERNEL_PREFIX") or sys.prefix)
        if current() != sys.executable:
            spec = KernelSpecManager().find_kernel_specs()[KERNEL_NAME]
            raise RunnerError(f"the kernel {KERNEL_NAME!r} at {spec} runs another Python; "
                              f"remove it (jupyter kernelspec remove {KERNEL_NAME})")
    return KERNEL_NAME


def check_output_dir(out: Path) -> None:
    """Refuse an output directory that cannot be written, before anything runs."""
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out / "runs"):
            pass
    except OSError as err:
        raise RunnerError(f"cannot write to output directory {out} ({err.strerror}); "
                          "pass --out with a writable directory") from None


def check_notebook(notebook: Path) -> None:
    if notebook.suffix != ".ipynb":
        raise RunnerError(f"{notebook} is not a notebook; pass a .ipynb file")
    if not notebook.is_file():
        raise RunnerError(f"notebook {notebook} does not exist; see `ls notebooks/`")


def _new_run_dir(out: Path, notebook: Path, parameters: dict) -> Path:
    digest = hashlib.sha1(json.dumps(parameters, sort_keys=True, default=str).encode())
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = out / "runs" / f"{notebook.stem}-{stamp}-{digest.hexdigest()[:8]}"
    folder, n = base, 1
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    folder.mkdir(parents=True)
    return folder


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # whole, when runs end at once
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


@contextmanager
def environ(**values: str):
    """Set environment variables for the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _failing_cell(nb: nbformat.NotebookNode) -> tuple[int | None, str]:
    """Index and traceback of the cell that raised or never finished."""
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                return i, strip_ansi("\n".join(output.traceback))
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("papermill", {}).get("status") in (RUNNING, FAILED):
            return i, ""
    return None, ""


def _add_error_banner(nb: nbformat.NotebookNode, status: str, error: str) -> None:
    """Put the error and its traceback in a cell at the top of the notebook."""
    nb.cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    index, traceback = _failing_cell(nb)
    where = f"in cell {index}" if index is not None else "before any cell ran"
    source = (f'<div style="border:2px solid #c0392b;padding:0.6em;border-radius:6px">\n'
              f"<b>This run {status} {where}:</b> {html.escape(error)}\n"
              + (f"<pre>{html.escape(traceback)}</pre>\n" if traceback else "") + "</div>")
    banner = nbformat.v4.new_markdown_cell(source, metadata={"tags": ["lab-error"]})
    nb.cells.insert(0, banner)


def _save_figures(nb: nbformat.NotebookNode, folder: Path) -> list[str]:
    names = []
    for i, cell in enumerate(nb.cells):
        for j, output in enumerate(cell.get("outputs", [])):
            png = output.get("data", {}).get("image/png")
            if png:
                folder.mkdir(exist_ok=True)
                name = f"cell{i:02d}-{j}.png"
                (folder / name).write_bytes(base64.b64decode(png))
                names.append(name)
    return names


def prepare(notebook: Path, resolution: Resolution, path: Path, *,
            record_inputs: bool = False) -> Path:
    """Write ``notebook`` with its effective parameters injected to ``path``: papermill's
    injected cell (every value not from the notebook's defaults) and a call that tells the
    experiment these are resolved (:func:`lab.runs.params.resolved`), so the same
    file runs the same under the runner, plain papermill and JupyterLab.
    ``record_inputs``: add the first and last cells that record the modules and data files
    the kernel uses (:mod:`lab.runs.inputs`)."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(notebook))  # papermill's reading: every cell has its tags
    if resolution.injected:  # else the notebook runs as it is, as papermill would run it
        nb = parameterize_notebook(nb, resolution.injected, kernel_name=KERNEL_NAME,
                                   language="python")
        cell = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
        by_source: dict[str, list[str]] = {}
        for name in resolution.injected:
            by_source.setdefault(resolution.sources[name], []).append(name)
        cell.source += ("\n# Resolved by `python -m lab run`: notebook default < preset < "
                        "explicit value\n"
                        + "".join(f"# {source}: {', '.join(names)}\n"
                                  for source, names in by_source.items())
                        + "import lab.runs.params\n\n"
                        f"lab.runs.params.resolved({resolution.marker!r})\n")
    if record_inputs:
        tagged = {"tags": [run_kernel.TAG]}
        nb.cells = ([nbformat.v4.new_code_cell(run_kernel.START_CELL, metadata=tagged)]
                    + nb.cells
                    + [nbformat.v4.new_code_cell(run_kernel.FINISH_CELL, metadata=tagged)])
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def cell_timeout(preset: str | None) -> int:
    """Seconds one cell may run by default: 30 minutes in a default run (a cell stuck that
    long is a fault), 6 hours under a named preset, whose claim runs spend an hour in one
    cell; ``--timeout`` sets it outright."""
    return DEFAULT_CELL_TIMEOUT if preset in (None, "default") else PRESET_CELL_TIMEOUT


CACHE_ENV = "LAB_COMPILE_CACHE"  # a folder for JAX's compilation cache, or "off"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false"  # Eigen's thread pool off


def available_cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def threads_per_kernel(jobs: int, cores: int) -> int:
    return max(1, cores // jobs)


def compile_cache_dir(xla_flags: str) -> Path | None:
    """The folder of JAX's persistent compilation cache for notebook runs: one per jax,
    jaxlib, machine and ``XLA_FLAGS``, under ``$LAB_COMPILE_CACHE`` or the per-user cache
    folder (``~/.cache/lab/jax-compile``), so no other version or flag reuses a program
    (JAX's own cache key also hashes the flags a kernel sets itself, e.g. the simulated
    devices of notebooks 09 and 10). None when ``LAB_COMPILE_CACHE=off``."""
    import platform
    from importlib import metadata

    root = os.environ.get(CACHE_ENV, "")
    if root.lower() in ("off", "0", "no", "false"):
        return None
    versions = []
    for name in ("jax", "jaxlib"):
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}==none")
    settings = sorted(f"{k}={v}" for k, v in os.environ.items()
                      if k.startswith("JAX_") and k != "JAX_COMPILATION_CACHE_DIR")
    key = hashlib.sha256("\n".join([*versions, platform.machine(), xla_flags, *settings])
                         .encode())
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME")
                                        or Path.home() / ".cache") / "lab" / "jax-compile"
    return base / f"{'-'.join(v.replace('==', '') for v in versions)}-{key.hexdigest()[:12]}"


def kernel_environment(jobs: int = 1, cores: int | None = None) -> dict[str, str]:
    """Variables for a notebook's kernel when ``jobs`` kernels run at once on ``cores``
    cores: each gets ``cores // jobs`` threads (at least one) for BLAS and, at one thread,
    for XLA's CPU backend (Eigen off; :func:`run_all` also pins a kernel of several threads
    to its own cores); beside other kernels no kernel preallocates a GPU's memory; every
    kernel uses the persistent compilation cache (:func:`compile_cache_dir`)."""
    cores = cores or len(available_cores())
    env: dict[str, str] = {}
    if jobs > 1:
        threads = threads_per_kernel(jobs, cores)
        env |= {name: str(threads) for name in THREAD_VARIABLES}
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        if threads == 1:
            env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREAD_XLA}".strip()
    cache = compile_cache_dir(env.get("XLA_FLAGS", os.environ.get("XLA_FLAGS", "")))
    if cache is not None and "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # yours wins
        env |= {"JAX_COMPILATION_CACHE_DIR": str(cache)} | {  # your own values win
            name: os.environ.get(name, default) for name, default in (
                ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1"),
                ("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0"))}
    return env


# --- stopping on a signal ----------------------------------------------------------------------
# SIGINT (Ctrl-C) and SIGTERM (a scheduler's time limit, `kill`) stop a run the same way: a
# KeyboardInterrupt in the main thread, which run_notebook records as "interrupted". While a
# run is being recorded (report, provenance) a signal is noted, not raised, so that a second
# Ctrl-C cannot leave a run marked "running"; a batch then starts no further notebook.
_shield = {"depth": 0, "pending": False}
STOP_WAIT = 120.0  # seconds the workers of a --jobs batch get to record an interrupted run
STOP_GRACE = 30.0  # then, seconds a worker that has sent its run gets to exit by itself


def _on_signal(signum, frame) -> None:
    if _shield["depth"]:
        _shield["pending"] = True
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in this process's main thread (SIGTERM's
    default would end the process before anything is recorded)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _on_signal)


@contextmanager
def recording():
    """A block that must finish (writing a run's record): signals wait until it has."""
    _shield["depth"] += 1
    try:
        yield
    finally:
        _shield["depth"] -= 1


def record_unfinished(notebook: Path, out: Path, hide_code: bool = False) -> list[RunResult]:
    """``notebook``'s runs under ``out`` still marked running (the process that ran them
    ended before recording the end): each recorded as interrupted, with its report."""
    found = []
    for folder in sorted((out / "runs").glob(f"{notebook.stem}-*")):
        try:
            run = json.loads((folder / PROVENANCE_FILE).read_text())
        except (OSError, ValueError):
            continue
        if run.get("status") != RUNNING:
            continue
        run |= {"status": INTERRUPTED, "ended": now(),
                "error": "interrupted: its process ended before it recorded the end"}
        run.setdefault("inputs", {})
        with recording():
            _finish(notebook, folder / notebook.name, folder, out, run, hide_code)
        found.append(RunResult(notebook, folder, INTERRUPTED, run["error"], run["metrics"]))
    return found


@functools.cache
def _socket_folder() -> Path:
    """One temporary folder per process for its kernels' Unix sockets (short paths: a
    socket's path must fit in about 100 characters), removed when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix="lab-kernels-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


_KERNELS: list["IPCKernelManager"] = []  # the kernels this process started, newest last
SETTLE_WAIT = 10.0  # seconds an interrupted kernel gets to answer before it is stopped


class IPCKernelManager(AsyncKernelManager):
    """The runner's kernels talk over Unix sockets, not TCP: nothing listens on a port (any
    local user could connect to one on 127.0.0.1), and the kernel prints no warning about
    unencrypted TCP. Each kernel's sockets are ``<socket folder>/<random>-<n>``. Each one
    started is kept in ``_KERNELS``, where a :class:`Deadline` finds it."""

    async def _async_post_start_kernel(self, **kw: Any) -> None:
        await super()._async_post_start_kernel(**kw)
        _KERNELS[:] = [k for k in _KERNELS if k.has_kernel] + [self]

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _ip_default(self) -> str:
        return str(_socket_folder() / uuid.uuid4().hex[:12])

    async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        if not now and self.has_kernel:
            await self._settle()
        await self._async_shutdown_kernel(now=now, restart=restart)

    async def _settle(self, timeout: float = SETTLE_WAIT) -> None:
        """Interrupt the kernel and wait until it answers a ``kernel_info_request`` on its
        shell channel, which it handles after the interrupted cell's reply: jupyter_client's
        shutdown interrupts and at once asks the kernel to stop, and a cell still running
        then sent its reply on a closed socket (a ZMQError traceback on every Ctrl-C). Gives
        up after ``timeout`` seconds (a cell that ignores the interrupt): the shutdown that
        follows kills what does not stop."""
        client = self.client()
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            await self._async_interrupt_kernel()
            asked = client.kernel_info()
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                reply = await client.get_shell_msg(timeout=left)
                if reply["parent_header"].get("msg_id") == asked:
                    break
        except Exception:  # noqa: BLE001 - no answer (queue.Empty) or a kernel gone: stop it anyway
            pass
        finally:
            client.stop_channels()


DEADLINE_ENV = "LAB_DEADLINE"  # a time-limited run's kernel: when (epoch seconds) it stops
CHECKPOINT_ENV = "LAB_CHECKPOINT_DIR"  # lab.train.checkpoint.default_dir
ATTEMPTS = "attempts"  # a resumed run's earlier attempts, each in attempts/<n>/
CHECKPOINTS = "checkpoints"  # a time-limited or resumed run's own checkpoint folder


def _same_parameters(values: dict[str, Any] | None) -> str:
    """Parameters as a key: equal for a run's values and their JSON round trip."""
    return json.dumps(values, sort_keys=True, default=str)


class Deadline:
    """Stops the running kernel before ``seconds`` are up: SIGINT ``grace`` seconds before
    (the running cell raises KeyboardInterrupt; the run is then recorded as interrupted with
    what it has, which takes a few seconds), SIGKILL at half the grace if it is still there
    (a cell that ignores the interrupt, or one that starts after it). ``fired``: whether
    the limit was reached."""

    def __init__(self, seconds: float | None):
        self.seconds, self.fired, self._timers = seconds, False, []

    @property
    def grace(self) -> float:
        # what recording takes: the kernel's shutdown, the report, the index (17 s measured
        # for a GA3C run beside two other kernels on the 2-core machine)
        return min(90.0, max(5.0, 0.2 * self.seconds)) if self.seconds else 0.0

    def __enter__(self) -> "Deadline":
        if self.seconds is not None:
            for at, signum in ((self.seconds - self.grace, signal.SIGINT),
                               (self.seconds - self.grace / 2, signal.SIGKILL)):
                timer = threading.Timer(max(0.0, at), self._fire, (signum,))
                timer.daemon = True
                timer.start()
                self._timers.append(timer)
        return self

    def _fire(self, signum: int) -> None:
        self.fired = True
        for kernel in reversed(_KERNELS):
            pid = getattr(kernel.provisioner, "pid", None) if kernel.has_kernel else None
            if pid:
                try:
                    os.kill(pid, signum)
                    return
                except ProcessLookupError:
                    continue

    def __exit__(self, *exc) -> None:
        for timer in self._timers:
            timer.cancel()


def resumable(folder: Path, notebook: Path) -> dict[str, Any]:
    """The record of the run in ``folder`` that ``--resume`` continues: a run of
    ``notebook`` that did not finish. A one-line RunnerError otherwise."""
    try:
        run = json.loads((folder / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        raise RunnerError(f"{folder} holds no run record ({PROVENANCE_FILE}); give the run "
                          "folder that the interrupted run printed") from None
    if run.get("notebook") != notebook.name:
        raise RunnerError(f"{folder} is a run of {run.get('notebook')}, not of "
                          f"{notebook.name}; give that notebook, or another folder")
    if run.get("status") in (OK, PRUNED):
        raise RunnerError(f"{folder} finished ({run['status']}); there is nothing to resume")
    return run


def _shelve(folder: Path, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Move an unfinished run's files (not its checkpoints) into ``attempts/<n>/``; return
    the run's attempts so far, this one last."""
    attempts = list(run.get(ATTEMPTS, []))
    where = folder / ATTEMPTS / str(len(attempts) + 1)
    where.mkdir(parents=True)
    for path in folder.iterdir():
        if path.name not in (ATTEMPTS, CHECKPOINTS):
            shutil.move(str(path), where / path.name)
    return attempts + [{k: run.get(k) for k in ("started", "ended", "duration_s", "status",
                                                 "error")} | {"folder": str(where)}]


def reports_folder(out: str | Path | None, resume: str | Path | None = None) -> Path:
    """Where a run's report and index go: ``out`` (default ``reports``); for a resumed run
    folder ``<reports>/runs/<run>``, that ``<reports>``, wherever the command runs from (a
    one-line RunnerError when ``out`` names another folder)."""
    home = None
    if resume is not None:
        folder = Path(resume).resolve()
        home = folder.parent.parent if folder.parent.name == "runs" else None
    if home is None:
        return Path("reports" if out is None else out)
    if out is not None and Path(out).resolve() != home:
        raise RunnerError(f"{resume} is a run of the reports folder {home}, not of {out}; "
                          f"leave out --out (its report and index go to {home})")
    return home


def run_notebook(notebook: str | Path, explicit: dict[str, Any] | None = None, *,
                 raw: dict[str, str] | None = None, out: str | Path | None = None,
                 timeout: int | None = None, hide_code: bool = False,
                 progress: bool = True, inputs: dict[str, str] | None = None,
                 resolution: Resolution | None = None,
                 kernel_env: dict[str, str] | None = None, alone: bool = True,
                 time_limit: float | None = None, resume: str | Path | None = None
                 ) -> RunResult:
    """Execute one notebook with ``explicit`` values for its parameters (``raw``: strings
    from ``-r``, taken as they are); see the module doc. ``inputs``: the run's
    :func:`~lab.runs.inputs.fingerprint`, and ``resolution`` its resolved
    parameters, if already known. ``timeout``: seconds one cell may run (None:
    :func:`cell_timeout` of the run's preset). ``kernel_env``: variables for the kernel
    (:func:`kernel_environment`; None: that of one notebook at a time). ``alone``: whether
    the runner kept every other kernel off the machine while this one ran (recorded as
    ``alone`` in provenance.json: the claims' pages mark a timing verdict measured beside
    other kernels).

    ``time_limit``: seconds the run may take; its kernel is stopped before then
    (:class:`Deadline`; ``LAB_DEADLINE`` tells the notebook when) and the run is recorded
    as interrupted with what it finished. ``resume``: the folder of an unfinished run of
    this notebook, run again there with the same parameters, its earlier files moved to
    ``attempts/<n>/``; its report and index go to the reports folder that holds it
    (:func:`reports_folder`; ``out`` None: ``reports``, or that folder). A time-limited or
    resumed run keeps its checkpoints in its own folder (``checkpoints/``, as
    ``LAB_CHECKPOINT_DIR``), so the folder carries what a resume needs, to another machine
    too; an experiment that checkpoints (GA3C's kept measurements, VS-ML's meta-training,
    SAC-AE's loop) continues from them."""
    kernel_env = dict(kernel_environment() if kernel_env is None else kernel_env)
    notebook, out = Path(notebook), reports_folder(out, resume)
    check_notebook(notebook)
    if time_limit is not None and time_limit < 10:
        raise RunnerError(f"--time-limit {time_limit:g} is too short; give at least 10 "
                          "seconds (a kernel takes a few to start and to record)")
    previous = resumable(Path(resume), notebook) if resume is not None else None
    if previous is not None:
        resolution = resolve(notebook, previous.get("overrides") or {})
        if _same_parameters(resolution.values) != _same_parameters(previous.get("parameters")):
            raise RunnerError(f"{notebook.name}'s parameters changed since the run in {resume} "
                              "(its defaults or presets were edited); start a new run")
    resolution = resolution or resolve(notebook, explicit or {}, raw=raw)
    parameters = resolution.values
    check_output_dir(out)
    kernel = ensure_kernel()

    if previous is not None:
        folder = Path(resume)
        attempts = _shelve(folder, previous)
    else:
        folder, attempts = _new_run_dir(out, notebook, parameters), []
    deadline = Deadline(time_limit)
    if time_limit is not None or previous is not None:
        kernel_env[CHECKPOINT_ENV] = str((folder / CHECKPOINTS).resolve())
    if time_limit is not None:
        kernel_env[DEADLINE_ENV] = f"{time.time() + time_limit - deadline.grace:.0f}"
    executed = prepare(notebook, resolution, folder / notebook.name, record_inputs=True)
    run = collect(notebook, resolution) | {
        "inputs": inputs or fingerprint(notebook, parameters),
        "kernel_environment": kernel_env or {}, "alone": alone,
        "run_dir": str(folder), "status": RUNNING,
        "started": now(), "ended": None, "duration_s": None, "error": None,
        "time_limit_s": time_limit,
    } | ({ATTEMPTS: attempts} if attempts else {})
    _write_json(folder / PROVENANCE_FILE, run)
    _write_json(folder / METRICS_FILE, {})  # every run has one; record() fills it
    status, error, start = OK, None, time.monotonic()
    try:
        with environ(**(kernel_env or {}), **{RUN_DIR_ENV: str(folder.resolve())}), deadline:
            papermill.execute_notebook(  # the prepared notebook: parameters are injected
                str(executed), str(executed), kernel_name=kernel,
                cwd=str(folder), progress_bar=progress, kernel_manager_class=IPCKernelManager,
                execution_timeout=timeout or cell_timeout(parameters.get("preset")))
    except PapermillExecutionError as err:
        interrupted = err.ename == "KeyboardInterrupt"
        status, error = (INTERRUPTED if interrupted else FAILED), f"{err.ename}: {err.evalue}"
    except KeyboardInterrupt as err:
        status, error = INTERRUPTED, f"interrupted ({err or 'SIGINT'})"
    except Exception as err:  # a cell timeout, a dead kernel, a kernel that never started
        first_line = (str(err).strip().splitlines() or [""])[0]
        status, error = FAILED, f"{type(err).__name__}: {first_line}"
    finally:
        if deadline.fired and status != OK:
            status, error = INTERRUPTED, (
                f"time limit of {time_limit:.0f} s reached; resume with: python -m lab run "
                f"{notebook} --resume {folder} [--time-limit SECONDS]")
        run |= {"status": status, "error": error, "ended": now(),
                "duration_s": round(time.monotonic() - start, 2)}
        with recording():
            _finish(notebook, executed, folder, out, run, hide_code)
    return RunResult(notebook, folder, run["status"], error, run["metrics"])


def _finish(notebook: Path, executed: Path, folder: Path, out: Path, run: dict,
            hide_code: bool) -> None:
    """Write provenance, figures, the HTML report and the index, whatever happened."""
    nb = nbformat.read(executed if executed.exists() else notebook, as_version=4)
    nb.cells = [c for c in nb.cells if run_kernel.TAG not in c.metadata.get("tags", [])]
    nbformat.write(nb, executed)  # the notebook as written, its own cells numbered as there
    used = run_kernel.read_used(folder)
    if used is not None:
        run["kernel_time"] = used.pop("time", {})
        run["compiled"] = used.pop("compiled", [])
    # what the kernel's jax saw; asked in a child process when the kernel did not say
    seen = (used or {}).pop("devices", None)
    run["jax_devices"] = seen if isinstance(seen, list) else jax_devices()
    run["inputs"] = complete(run["inputs"], used if run["status"] == OK else None)
    if run["status"] != OK:
        _add_error_banner(nb, run["status"], run["error"])
        nbformat.write(nb, executed)
    run["figures"] = _save_figures(nb, folder / "figures")
    run["metrics"] = read_metrics(folder)
    if run["status"] == OK and "pruned_at_phase" in run["metrics"]:
        run["status"] = PRUNED
    _write_json(folder / PROVENANCE_FILE, {k: v for k, v in run.items() if k != "metrics"})
    _publish(export_html(nb, run, folder / REPORT_FILE, hide_code=hide_code), out, notebook)
    _forget_reuse(out, notebook.name)
    build_index(out)


def _publish(report: Path, out: Path, notebook: Path) -> None:
    """Make ``report`` the notebook's latest report, ``<out>/<notebook>.html``."""
    latest = out / f"{notebook.stem}.html"
    tmp = latest.with_name(f".{latest.name}.{os.getpid()}.tmp")  # whole, when runs end at once
    shutil.copyfile(report, tmp)
    tmp.replace(latest)


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _read_reused(out: Path) -> dict[str, dict[str, str]]:
    try:
        return json.loads((out / REUSED_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _forget_reuse(out: Path, notebook: str) -> None:
    """A notebook that ran anew is no longer one the last ``make reports`` reused."""
    reused = _read_reused(out)
    if reused.pop(notebook, None) is not None:
        _write_json(out / REUSED_FILE, reused)


def _reuse(run: dict[str, Any], notebook: Path, out: Path) -> RunResult:
    """Keep an earlier ``ok`` run as this notebook's latest report and note the reuse."""
    folder = Path(run["folder"])
    _publish(folder / REPORT_FILE, out, notebook)
    _write_json(out / REUSED_FILE, _read_reused(out) | {
        notebook.name: {"run": folder.name, "reused_at": now()}})
    return RunResult(notebook, folder, OK, None, read_metrics(folder), reused=True)


class Plan(NamedTuple):
    """What ``run_all`` will do with one notebook."""

    notebook: Path
    resolution: Resolution  # its effective parameters
    inputs: dict[str, str]  # its fingerprint now
    reuse: dict[str, Any] | None  # the ok run with the same inputs, or None: run it
    estimate: float | None  # seconds its last ok run took
    changed: list[str]  # which inputs changed since that run


def _estimate(this: float | None, plans: list[Plan]) -> str:
    """The progress line's estimate: this notebook's last run, and what is left to run."""
    left = [p.estimate for p in plans if p.reuse is None]
    known = [e for e in left if e is not None]
    text = f"its last run took {_minutes(this)}" if this is not None else "no earlier run"
    if known:
        text += f"; about {_minutes(sum(known))} left"
        if len(known) < len(left):
            text += f" plus {len(left) - len(known)} notebook(s) never run"
    return text


def offers(notebook: Path, preset: str | None) -> bool:
    """Whether ``notebook`` can run with ``preset`` (None: its defaults, always)."""
    return preset is None or preset in notebook_presets(notebook)


def write_prepared(notebook: Path, resolution: Resolution, out: Path) -> Path:
    """``--prepare-only``: the prepared notebook (:func:`prepare`) and the record of its
    effective parameters beside it, under ``<out>/prepared/``; nothing runs."""
    check_output_dir(out)
    name = notebook.stem + ("" if resolution.preset == "default" else f"-{resolution.preset}")
    path = prepare(notebook, resolution, out / "prepared" / f"{name}.ipynb")
    _write_json(path.with_suffix(".parameters.json"), {
        "notebook": str(notebook), "preset": resolution.preset,
        "parameters": resolution.values, "parameter_sources": resolution.sources,
        "overrides": resolution.explicit})
    return path


def run_all(folder: str | Path = "notebooks", *, preset: str | None = None,
            force: bool = False, prepare_only: bool = False, log=print, jobs: int = 1,
            time_limit: float | None = None, resume: bool = False,
            **kwargs: Any) -> list[RunResult]:
    """Run every notebook in ``folder`` with its defaults, or every one that offers
    ``preset`` with that preset (the others are logged as skipped), in name order; a
    failure does not stop the others, Ctrl-C does. A notebook whose inputs are unchanged
    since its last ``ok`` run (same effective parameters) is not run again unless
    ``force``. ``prepare_only``: write each prepared notebook (:func:`write_prepared`) instead of
    running it. ``log`` gets one progress line per notebook: k of n, elapsed, the estimate
    left from each notebook's last run. ``jobs``: how many notebooks run at once
    (:func:`_run_side_by_side`), each in a worker process of its own.

    ``time_limit``: seconds for the whole batch, which then runs one notebook at a time (as
    does ``resume``), each with the time left (:func:`run_notebook`); the notebooks it did
    not reach are listed as not started. ``resume``: a notebook whose latest run with these
    parameters is unfinished continues it (``run_notebook(resume=...)``); with
    ``time_limit``, repeating the command finishes the set window by window."""
    out = Path(kwargs.get("out", "reports"))
    notebooks = sorted(Path(folder).glob("*.ipynb"))
    skipped = [nb for nb in notebooks if not offers(nb, preset)]
    if skipped:
        log(f"skipped (no preset {preset!r}): " + ", ".join(nb.name for nb in skipped))
    notebooks = [nb for nb in notebooks if nb not in skipped]
    check_output_dir(out)
    # every notebook's parameters are resolved (and bad ones refused) before any run
    resolutions = [resolve(nb, {} if preset is None else {"preset": preset}) for nb in notebooks]
    if prepare_only:
        paths = [write_prepared(nb, r, out) for nb, r in zip(notebooks, resolutions, strict=True)]
        for path in paths:
            log(f"prepared {path}")
        return []
    deps = dependencies_digest()
    runs = load_runs(out)
    plans = []
    for notebook, resolution in zip(notebooks, resolutions, strict=True):
        parameters = resolution.values
        start = fingerprint(notebook, parameters, dependencies=deps)
        mine = [r for r in runs if r.get("notebook") == notebook.name
                and r.get("status") == OK and r.get("parameters") == parameters]
        same = next((r for r in mine if (r.get("inputs") or {}).get("files")
                     and not changed(r["inputs"], complete(start, refresh(r["inputs"])))
                     and (Path(r["folder"]) / REPORT_FILE).exists()), None)
        estimate = next((r.get("duration_s") for r in mine), None)
        last = (mine[0] if mine else {}).get("inputs")
        plans.append(Plan(notebook, resolution, start, None if force else same, estimate,
                          changed(last, complete(start, refresh(last)))))
    start_time, results = time.monotonic(), []
    to_run = []
    for k, plan in enumerate(plans, 1):
        if plan.reuse is not None:
            log(f"[{k}/{len(plans)}] {plan.notebook.name}: reusing the ok run of "
                f"{plan.reuse['started'][:16].replace('T', ' ')} UTC, inputs unchanged "
                "(--force runs it)")
            results.append(_reuse(plan.reuse, plan.notebook, out))
        else:
            to_run.append((k, plan))
            _forget_reuse(out, plan.notebook.name)  # here, before runs end side by side
    jobs = min(jobs, len(to_run))  # one notebook to run gets every core, in this process
    if time_limit is not None or resume:
        jobs = 1  # the batch's time is shared out, and runs resumed, one after another
    unfinished = {}
    if resume:
        for r in runs:  # newest first: a notebook's latest run with these parameters
            key = (r.get("notebook"), _same_parameters(r.get("parameters")))
            unfinished.setdefault(key, Path(r["folder"]) if r.get("status") in (
                INTERRUPTED, FAILED, RUNNING) else None)
    if jobs <= 1:
        for k, plan in to_run:
            left = None if time_limit is None else time_limit - (time.monotonic() - start_time)
            if left is not None and left < 10:
                results += [RunResult(p.notebook, out, INTERRUPTED, "not started: the batch's "
                                      "time limit was reached") for j, p in to_run if j >= k]
                break
            again = unfinished.get((plan.notebook.name,
                                    _same_parameters(plan.resolution.values)))
            log(f"[{k}/{len(plans)}] {plan.notebook.name}, "
                f"{_minutes(time.monotonic() - start_time)} elapsed: "
                + (f"resuming {again.name}" if again else f"running ({_reason(plan, force)})")
                + f"; {_estimate(plan.estimate, [p for j, p in to_run if j >= k])}")
            if again is not None:
                results.append(run_notebook(plan.notebook, resume=again, time_limit=left,
                                            inputs=plan.inputs, **kwargs))
            else:
                results.append(run_notebook(plan.notebook, resolution=plan.resolution,
                                            inputs=plan.inputs, time_limit=left, **kwargs))
            if results[-1].status == INTERRUPTED or _shield["pending"]:  # a signal came
                why = ("the batch's time limit was reached" if (results[-1].error or "")
                       .startswith("time limit") else "the batch was interrupted")
                results += [RunResult(p.notebook, out, INTERRUPTED, f"not started: {why}")
                            for j, p in to_run if j > k]
                break
    else:
        results += _run_side_by_side(to_run, len(plans), jobs, force, start_time, log, kwargs)
    build_index(out)
    log(f"done in {_minutes(time.monotonic() - start_time)}: {len(results)} notebook(s), "
        f"{sum(r.reused for r in results)} reused")
    return results


def _reason(plan: "Plan", force: bool, shown: int = 4) -> str:
    """Why a notebook runs: forced, or what changed (the first few files by name)."""
    if force:
        return "forced"
    names = plan.changed[:shown] + ([f"{len(plan.changed) - shown} more"]
                                    if len(plan.changed) > shown else [])
    return "changed: " + ", ".join(names)


def _slot_cores(slot: int, threads: int, cores: list[int]) -> list[int]:
    return cores[slot * threads:(slot + 1) * threads]


def next_to_start(queue: list[Path], running: list[Path], alone: set[Path]) -> int | None:
    """The index in ``queue`` of the next notebook to start beside ``running`` (None: wait):
    a notebook in ``alone`` (it times its claims) starts only when nothing runs and nothing
    starts beside it; the others fill the free slots meanwhile, the queue's order kept, so
    the ones that run alone come last, one by one."""
    if any(nb in alone for nb in running):
        return None
    return next((i for i, nb in enumerate(queue) if not running or nb not in alone), None)


def times_its_claims(notebook: Path) -> bool:
    """Whether ``notebook``'s experiment declares a timing claim (``timing=True`` in its
    ``CLAIMS``): ``run_all`` then runs it with no other kernel beside it."""
    try:
        module = experiment_module(notebook)
    except (ValueError, ImportError, OSError, json.JSONDecodeError):
        return False
    return any(getattr(c, "timing", False) for c in getattr(module, "CLAIMS", {}).values())


def _run_in_worker(plan: "Plan", kwargs: dict, env: dict[str, str],
                   cores: list[int]) -> RunResult:
    """One notebook in a worker process of its own (cwd and environment are per process,
    and papermill changes both): pinned to ``cores`` when there are several."""
    stop_on_signals()  # the batch passes SIGINT on; SIGTERM alone would end it unrecorded
    if len(cores) > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)  # the kernel inherits it: XLA sizes its pool by it
    return run_notebook(plan.notebook, resolution=plan.resolution, inputs=plan.inputs,
                        kernel_env=env, **kwargs)


def _run_side_by_side(to_run: list[tuple[int, "Plan"]], total: int, jobs: int, force: bool,
                      start_time: float, log, kwargs: dict) -> list[RunResult]:
    """Up to ``jobs`` notebooks at once, the longest first (by their last runs' times, never
    run ones first of all), each kernel with its share of the cores
    (:func:`kernel_environment`); one line when each starts and when each ends."""
    import concurrent.futures as cf
    import multiprocessing

    cores = available_cores()
    threads = threads_per_kernel(jobs, len(cores))
    env = kernel_environment(jobs, len(cores))
    ensure_kernel()  # once, before the workers look for it
    queue = sorted(to_run, key=lambda kp: -(kp[1].estimate if kp[1].estimate is not None
                                            else float("inf")))
    alone = {plan.notebook for _, plan in queue if times_its_claims(plan.notebook)}
    free, running, results = list(range(jobs)), {}, []
    # A fresh process per notebook (cwd and environment are per process), spawned (nothing
    # of this process's threads or state carried over); skip_iri_grammar: 1.5-2 s less of
    # each one's imports.
    pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=skip_iri_grammar, max_tasks_per_child=1)
    try:
        while queue or running:
            while queue and free:
                pick = next_to_start([p.notebook for _, p in queue],
                                     [p.notebook for _, p, _ in running.values()], alone)
                if pick is None:
                    break
                (k, plan), slot = queue.pop(pick), free.pop(0)
                by_itself = plan.notebook in alone
                log(f"[{k}/{total}] {plan.notebook.name}, "
                    f"{_minutes(time.monotonic() - start_time)} elapsed: running "
                    f"({_reason(plan, force)}) "
                    + ("alone (it times its claims); " if by_itself else
                       f"beside {len(running)} other(s); ")
                    + f"{_estimate(plan.estimate, [plan] + [p for _, p in queue])}")
                pinned = cores if by_itself else (
                    _slot_cores(slot, threads, cores) if threads > 1 else [])
                future = pool.submit(
                    _run_in_worker, plan, kwargs | {"progress": False, "alone": by_itself},
                    kernel_environment(1, len(cores)) if by_itself else env,
                    pinned if len(pinned) > 1 else [])
                running[future] = (k, plan, slot)
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in done:
                k, plan, slot = running.pop(future)
                free.append(slot)
                try:
                    result = future.result()
                except Exception as err:  # the worker died: say so, go on with the others
                    log(f"[{k}/{total}] {plan.notebook.name}: the worker failed "
                        f"({type(err).__name__}: {err})")
                    continue
                results.append(result)
                log(f"[{k}/{total}] {plan.notebook.name}: {result.status} after "
                    f"{_minutes(provenance_duration(result))}, "
                    f"{_minutes(time.monotonic() - start_time)} elapsed, "
                    f"{len(queue) + len(running)} left")
    except KeyboardInterrupt:
        with recording():
            log("interrupted: stopping the running notebooks; each records its run")
            workers = list((getattr(pool, "_processes", None) or {}).values())
            for worker in workers:  # a terminal's Ctrl-C reached them; a `kill` did not
                with suppress(OSError):
                    os.kill(worker.pid, signal.SIGINT)
            cf.wait(running, timeout=STOP_WAIT)
            # A worker that has sent its run exits by itself. Killed in that moment, it could
            # hold the pool's result queue's lock for ever, and the pool's shutdown would
            # then wait for ever on the workers that replace it (seen in 1 of 3 tries beside
            # other work): each gets time to exit, and only one still running is stopped.
            _await_exit(workers, STOP_GRACE if all(f.done() for f in running) else 5.0)
            for worker in workers:
                if worker.exitcode is None:
                    with suppress(OSError):
                        worker.kill()
            for future, (_, plan, _) in running.items():
                done = future.done() and not future.cancelled() and future.exception() is None
                out = Path(kwargs.get("out", "reports"))
                # a worker stopped before it made its run folder leaves nothing to record,
                # but the notebook is still listed as interrupted
                results += ([future.result()] if done else record_unfinished(
                    plan.notebook, out, kwargs.get("hide_code", False)) or [RunResult(
                        plan.notebook, out, INTERRUPTED,
                        "interrupted before its run folder was made")])
            results += [RunResult(plan.notebook, Path(kwargs.get("out", "reports")),
                                  INTERRUPTED, "not started: the batch was interrupted")
                        for _, plan in queue]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def _await_exit(processes: list, seconds: float) -> None:
    """Wait until every one of ``processes`` has exited, or ``seconds`` have passed."""
    from multiprocessing.connection import wait

    end = time.monotonic() + seconds
    pending = [p for p in processes if p.exitcode is None]
    while pending and (left := end - time.monotonic()) > 0:
        ready = wait([p.sentinel for p in pending], timeout=left)
        pending = [p for p in pending if p.sentinel not in ready]


def provenance_duration(result: RunResult) -> float | None:
    try:
        return json.loads((result.run_dir / PROVENANCE_FILE).read_text()).get("duration_s")
    except (OSError, json.JSONDecodeError):
        return None
