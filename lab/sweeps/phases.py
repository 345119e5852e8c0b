"""Report a training's progress to a sweep, phase by phase, and stop when it says so.

A notebook calls ``report_phase(fraction, value)`` after each evaluation: ``fraction`` of
its training done, ``value`` the metric the sweep ranks trials by (higher or lower is
better as the sweep's spec says). Inside a sweep (the worker sets ``LAB_SWEEP`` for the
kernel) each time a phase boundary is crossed the value goes to the Optuna study as that
phase's intermediate value, and the study's pruner (HyperTrick) decides: ``False`` means
stop training now; the notebook then finishes its cells as usual and the run records
``pruned_at_phase``. Outside a sweep it returns True and does nothing, so the same
notebook runs in JupyterLab, under papermill and as a trial.

The trial belongs to the worker, which asked for it and tells the study how it ended
(PRUNED through ``study.tell``, Optuna's ask-and-tell way). So ``report_phase`` returns
False rather than raising ``optuna.TrialPruned``: that exception is for an objective run
by ``study.optimize``, and here it would stop the notebook before it records
``pruned_at_phase`` and writes its report, making a pruned run a failed one.
"""

import json
import math
import os

from lab.runs.records import record

SWEEP_ENV = "LAB_SWEEP"
"""JSON ``{"storage", "study", "trial", "phases"}`` (``trial``: the trial's number), set by
the sweep worker."""
_trial = {}  # the kernel's trial: its study, storage and id, the last phase reported


def in_sweep() -> bool:
    return bool(os.environ.get(SWEEP_ENV))


def _current():
    info = json.loads(os.environ[SWEEP_ENV])
    key = (info["storage"], info["study"], info["trial"])
    if _trial.get("key") != key:
        from lab.sweeps import study as studies

        # Optuna makes a ``Trial`` for a running trial only in the process that asked for
        # it; this kernel reports through the storage's public methods with the trial's id.
        spec = studies.read_spec(info["storage"], info["study"], check_notebook=False)
        storage = studies.make_storage(info["storage"], spec.retries)
        _trial.update(key=key, study=studies.open_study(storage, info["study"], spec),
                      storage=storage, id=studies.trial_id(storage, info["study"], info["trial"]),
                      phase=0, phases=info["phases"], values=[])
    return _trial


def report_phase(fraction: float, value: float) -> bool:
    """Tell the sweep (if any) the metric after ``fraction`` of training; False: stop."""
    if not in_sweep():
        return True
    state = _current()
    phase = min(math.floor(fraction * state["phases"] + 1e-9), state["phases"])
    if phase <= state["phase"]:
        return True
    state["phase"] = phase
    value = float(value)
    storage, study = state["storage"], state["study"]
    storage.set_trial_intermediate_value(state["id"], phase, value)
    state["values"].append(value)
    record(sweep_phase=phase, sweep_phase_values=state["values"])
    if phase < state["phases"] and study.pruner.prune(study, storage.get_trial(state["id"])):
        record(pruned_at_phase=phase)
        return False
    return True
