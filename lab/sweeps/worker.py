"""Sweep workers: each takes the study's next waiting trial, runs the notebook through the
runner with the sampled parameters, and tells the study how it ended.

    run_sweep(spec, out="reports", workers=4)          # create the study, start 4 workers
    work(storage_url, "mpo-pendulum", out="reports")   # one worker (any machine)

Every trial is one run of the notebook (its own run folder, record and HTML report, under
``<out>/sweeps/<study>/runs``). The notebook learns it is in a sweep from ``LAB_SWEEP`` and
reports its metric after each phase with ``lab.experiments.report_phase``; when the study's
pruner says stop, the notebook stops training, records ``pruned_at_phase`` and finishes,
and the trial is told PRUNED. A notebook that fails makes its trial FAIL; the sweep goes on.
"""

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from lab.sweeps import study as studies
from lab.sweeps.phases import SWEEP_ENV
from lab.sweeps.spec import SweepSpec, quantize


def suggest(trial: optuna.Trial, spec: SweepSpec) -> dict[str, Any]:
    """The notebook's parameters for this trial: the spec's space, sampled."""
    values = {}
    for d in spec.space:
        if d.kind == "choice":
            values[d.name] = trial.suggest_categorical(d.name, list(d.values))
        elif d.kind == "int":
            values[d.name] = trial.suggest_int(d.name, int(d.low), int(d.high))
        elif d.kind == "qloguniform" and d.q == 1:
            values[d.name] = trial.suggest_int(d.name, int(d.low), int(d.high), log=True)
        elif d.kind == "qloguniform":
            values[d.name] = quantize(d, trial.suggest_float(d.name, d.low, d.high, log=True))
        else:
            values[d.name] = trial.suggest_float(d.name, d.low, d.high,
                                                 log=d.kind == "loguniform")
    return values


@contextmanager
def heartbeat(storage: RDBStorage, trial_id: int):
    """Record the trial's heartbeat every few seconds while the block runs."""
    done = threading.Event()

    def beat():
        while not done.wait(studies.HEARTBEAT_SECONDS):
            try:
                storage.record_heartbeat(trial_id)
            except Exception:  # a busy database: the next beat will do
                pass

    storage.record_heartbeat(trial_id)
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def run_trial(study: optuna.Study, storage: RDBStorage, trial: optuna.Trial, trial_id: int,
              spec: SweepSpec, storage_url: str, out: Path) -> TrialState:
    """Run the notebook for one trial and tell the study how it ended. ``storage`` is the
    study's own and ``trial_id`` the trial's id in it (``study.trial_id``); the caller holds
    the trial's heartbeat (``heartbeat``) from the moment ``ask()`` made it."""
    try:
        values = suggest(trial, spec)
    except Exception as err:  # noqa: BLE001 (the sweep goes on)
        trial.set_user_attr("error", f"{type(err).__name__}: {err}")
        study.tell(trial, state=TrialState.FAIL)
        return TrialState.FAIL
    trial.set_user_attr("parameters", values)
    env = {"storage": storage_url, "study": spec.name, "trial": trial.number,
           "phases": spec.phases}
    # the runner brings nbformat and papermill (seconds of imports): only a trial needs them,
    # not a kernel that samples configurations (notebooks 05 and 08 import this module)
    from lab.runs.runner import OK, PRUNED, environ, run_notebook

    start = time.monotonic()
    with environ(**{SWEEP_ENV: json.dumps(env)}):
        try:
            result = run_notebook(spec.notebook, spec.fixed | values, out=out,
                                  timeout=spec.timeout, progress=False)
            status, error, run_dir, metrics = (result.status, result.error, result.run_dir,
                                               result.metrics)
        except Exception as err:  # noqa: BLE001 (a value the notebook refused, say)
            status, error, run_dir, metrics = "failed", f"{type(err).__name__}: {err}", None, {}
    state = storage.get_trial(trial_id).state
    if state.is_finished():  # failed meanwhile as stale (heartbeats held up): keep that
        return state
    attrs = {"seconds": round(time.monotonic() - start, 2), "status": status,
             "run_dir": None if run_dir is None else str(run_dir)}
    value = metrics.get(spec.metric)
    if status not in (OK, PRUNED):
        end, attrs["error"] = TrialState.FAIL, error
    elif "pruned_at_phase" in metrics:
        end = TrialState.PRUNED
    elif not isinstance(value, int | float) or isinstance(value, bool):
        end, attrs["error"] = TrialState.FAIL, f"the notebook recorded no number {spec.metric!r}"
    else:
        end = TrialState.COMPLETE
    for key, attr in attrs.items():
        trial.set_user_attr(key, attr)
    study.tell(trial, float(value) if end == TrialState.COMPLETE else None,
               state=None if end == TrialState.COMPLETE else end, skip_if_finished=True)
    return end


def work(storage_url: str, name: str, *, out: str | Path = "reports", worker: int = 0,
         max_trials: int | None = None) -> int:
    """Run the study's waiting trials one after another until none is left (or
    ``max_trials`` ran); returns how many this worker ran."""
    spec = studies.read_spec(storage_url, name)
    storage = studies.make_storage(storage_url, spec.retries)
    study = studies.open_study(storage, name, spec, worker)
    out = Path(out) / "sweeps" / name
    ran = 0
    while max_trials is None or ran < max_trials:
        optuna.storages.fail_stale_trials(study)  # a dead worker's trial: failed, retried
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            break
        trial = study.ask()
        # The trial is RUNNING from here on, and the storage only calls a trial stale once it
        # has a heartbeat: beat at once, so that a worker killed now leaves a trial that fails
        # and is retried rather than one that runs for ever.
        trial_id = studies.trial_id(storage, name, trial.number)
        with heartbeat(storage, trial_id):
            if trial.number >= spec.trials and not _is_retry(storage.get_trial(trial_id)):
                # another worker took the last waiting trial first; ask() made a new one
                trial.set_user_attr("surplus", True)
                study.tell(trial, state=TrialState.FAIL)
                break
            run_trial(study, storage, trial, trial_id, spec, storage_url, out)
        ran += 1
    return ran


def _is_retry(frozen: optuna.trial.FrozenTrial) -> bool:
    return RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen) is not None


def run_sweep(spec: SweepSpec, *, out: str | Path = "reports", storage: str | None = None,
              workers: int | None = None) -> optuna.Study:
    """Create the study and run it with ``workers`` processes on this machine (each one
    ``python -m lab sweep worker``); returns the finished study."""
    url = storage or studies.default_storage(out, spec.name)
    studies.create(spec, url)
    count = workers or spec.workers
    commands = [[sys.executable, "-m", "lab", "sweep", "worker", "--storage", url, "--study",
                 spec.name, "--out", str(out), "--worker", str(i)] for i in range(count)]
    processes = [subprocess.Popen(c) for c in commands]
    try:
        codes = [p.wait() for p in processes]
    except BaseException:  # stopped (a deadline, Ctrl-C): no worker goes on writing the study
        for p in processes:
            p.terminate()
        for p in processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    if any(codes):
        print(f"warning: worker exit codes {codes}", file=sys.stderr)
    study, _ = studies.load(url, spec.name)
    optuna.storages.fail_stale_trials(study)
    return study
