"""Report a training's progress to a sweep, phase by phase, and stop when it says so.

A notebook calls ``report_phase(fraction, value)`` after each evaluation: ``fraction`` of
its training done, ``value`` the metric the sweep ranks trials by (higher or lower is
better as the sweep's spec says). Inside a sweep (the worker sets ``LAB_SWEEP`` for the
kernel) each time a phase boundary is crossed the value goes to the Optuna study as that
phase's intermediate value, and the study's pruner (HyperTrick) decides: ``False`` means
stop training now; the notebook then finishes its cells as usual and the run records
``pruned_at_phase``. Outside a sweep it returns True and does nothing, so the same
notebook runs in JupyterLab, under papermill and as a trial.
"""

import json
import math
import os

from lab.experiments.records import record

SWEEP_ENV = "LAB_SWEEP"
"""JSON ``{"storage", "study", "trial_id", "phases"}``, set by the sweep worker."""
_trial = {}  # the kernel's trial: {"trial": optuna.Trial, "phase": last phase reported}


def in_sweep() -> bool:
    return bool(os.environ.get(SWEEP_ENV))


def _current():
    info = json.loads(os.environ[SWEEP_ENV])
    key = (info["storage"], info["study"], info["trial_id"])
    if _trial.get("key") != key:
        import optuna

        from lab.sweeps import study as studies

        study, _ = studies.load(info["storage"], info["study"], check_notebook=False)
        _trial.update(key=key, trial=optuna.trial.Trial(study, info["trial_id"]), phase=0,
                      phases=info["phases"], values=[])
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
    state["trial"].report(value, phase)
    state["values"].append(value)
    record(sweep_phase=phase, sweep_phase_values=state["values"])
    if phase < state["phases"] and state["trial"].should_prune():
        record(pruned_at_phase=phase)
        return False
    return True
