"""Parameter sweeps over notebooks with HyperTrick early termination, on Optuna storage.

``load_spec`` reads a sweep's YAML (or dict) specification, ``run_sweep`` creates the study
and runs its trials with worker processes on this machine, ``work`` is one worker (start it
on other machines against a PostgreSQL storage to join), and ``lab.sweeps.report`` draws
and writes the results (imported where it is used: it brings matplotlib, which a worker
does not need). ``HyperTrickPruner`` is the early-termination rule as an Optuna
pruner. See ``lab.sweeps.worker`` for how a trial runs its notebook.
"""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "HyperTrickPruner": ".hypertrick",
    "SpecError": ".spec",
    "SweepSpec": ".spec",
    "TrialSeededSampler": ".hypertrick",
    "load_spec": ".spec",
    "run_sweep": ".worker",
    "work": ".worker",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
