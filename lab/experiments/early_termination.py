"""When does early termination pay? HyperTrick on its own workload (issue 21).

Heinrich & Frosio (2019) tuned GA3C with HyperTrick over the learning rate (log-uniform on
[1e-5, 1e-2]), t_max (quantised log-uniform integers on [2, 100]) and the discount (one of
0.9 ... 0.9999). Notebook 05 found HyperTrick worse than random search on MPO/Pendulum,
whose early returns rank configurations badly. Here the same question on the actor-critic
workload, answered from recorded learning curves:

1. ``sample_configs`` draws the configurations a live sweep with the same sampler seed
   tries, trial by trial (``lab.sweeps.TrialSeededSampler``, through an in-memory study);
2. ``lab.experiments.a2c.curves`` trains each with the jitted A2C for the same number of
   environment steps (configurations sharing t_max as one vmapped program) and records the
   mean training-episode return at equally spaced evaluations;
3. ``lab.sweeps.simulator`` replays sweeps from those curves.
"""

from typing import Any

import optuna

from lab.sweeps.hypertrick import TrialSeededSampler
from lab.sweeps.spec import SweepSpec
from lab.sweeps.worker import suggest

# the seed's HyperTrick search space for GA3C (notebook parameters of the A2C workload)
SPACE = {
    "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2},
    "t_max": {"type": "qloguniform", "low": 2, "high": 100, "q": 1},
    "discount": {"type": "choice",
                 "values": [0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999]},
}


def sample_configs(spec: SweepSpec, n: int, seed: int) -> list[dict[str, Any]]:
    """The parameters trials 0 .. n-1 of a live sweep of ``spec`` with sampler seed ``seed``
    draw (the same calls a worker makes, on an in-memory study)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=TrialSeededSampler(seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(suggest(trial, spec))
        study.tell(trial, 0.0)
    return out
