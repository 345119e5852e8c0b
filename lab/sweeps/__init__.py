"""Parameter sweeps over notebooks with HyperTrick early termination, on Optuna storage.

``load_spec`` reads a sweep's YAML (or dict) specification, ``run_sweep`` creates the study
and runs its trials with worker processes on this machine, ``work`` is one worker (start it
on other machines against a PostgreSQL storage to join), and ``lab.sweeps.report`` draws
and writes the results (imported where it is used: it brings matplotlib, which a worker
does not need). ``HyperTrickPruner`` is the early-termination rule as an Optuna
pruner. See ``lab.sweeps.worker`` for how a trial runs its notebook.
"""

from lab.sweeps.hypertrick import HyperTrickPruner, TrialSeededSampler
from lab.sweeps.spec import SpecError, SweepSpec, load_spec
from lab.sweeps.worker import run_sweep, work

__all__ = ["HyperTrickPruner", "SpecError", "SweepSpec", "TrialSeededSampler", "load_spec",
           "run_sweep", "work"]
