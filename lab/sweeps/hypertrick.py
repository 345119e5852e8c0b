"""HyperTrick as an Optuna pruner, and a random sampler whose draws depend on the trial only.

HyperTrick (Heinrich & Frosio 2019) cuts each trial's training into ``phases`` equal
phases. When a trial finishes phase p it reports its metric (``trial.report(value, p)``);
it goes on only if that value ranks within the top fraction ``survival`` (r) of the values
of every trial that has finished phase p so far, itself included. There is no barrier:
the first trial to finish a phase always goes on, and a pruned trial's worker starts a new
configuration at once. Of N trials about N r^(Np - 1) run to the end.
"""

import math
import zlib

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial


class HyperTrickPruner(BasePruner):
    """Prune a trial at phase p unless its value is in the top ``survival`` fraction of the
    values reported at phase p so far (by any trial, in any state). Phases are the steps
    1 .. ``phases``; the last phase is never pruned (the trial has finished)."""

    def __init__(self, phases: int, survival: float):
        if phases < 1 or not 0 < survival <= 1:
            raise ValueError(f"HyperTrick needs phases >= 1 and survival in (0, 1], got "
                             f"{phases} and {survival}")
        self.phases, self.survival = phases, survival

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        phase = trial.last_step
        if phase is None or phase >= self.phases:
            return False
        value = trial.intermediate_values[phase]
        if math.isnan(value):
            return True
        reported = [t.intermediate_values[phase] for t in study.get_trials(deepcopy=False)
                    if phase in t.intermediate_values]
        reported = [v for v in reported if not math.isnan(v)]
        return ranks_below(value, reported, self.survival,
                           study.direction == StudyDirection.MAXIMIZE)


def ranks_below(value: float, reported: list[float], survival: float, maximize: bool) -> bool:
    """True when fewer than ``ceil(survival * n)`` of the ``n`` reported values (``value``
    among them) may be better than ``value``: it is outside the top fraction. Ties favour
    ``value``."""
    better = sum((v > value) if maximize else (v < value) for v in reported)
    return better >= math.ceil(survival * len(reported))


class TrialSeededSampler(BaseSampler):
    """Random search whose every draw depends only on ``(seed, trial number, parameter)``.

    Two studies with the same seed try the same configuration at the same trial number,
    whichever worker process runs it, so a HyperTrick sweep and a random search without
    early stopping sample the same configurations in the same order (Optuna's own
    ``RandomSampler`` keeps one random stream per process, which parallel workers would
    share or reorder)."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial: FrozenTrial, name: str,
                           distribution: BaseDistribution):
        rng = np.random.default_rng([self.seed, trial.number, zlib.crc32(name.encode())])
        return draw(rng, distribution)


def draw(rng: np.random.Generator, d: BaseDistribution):
    """One uniform draw from an Optuna distribution (log-uniform where ``log``)."""
    if isinstance(d, CategoricalDistribution):
        return d.choices[int(rng.integers(len(d.choices)))]
    if isinstance(d, IntDistribution):
        low, high = d.low - 0.5, d.high + 0.5  # equal mass per integer
        x = math.exp(rng.uniform(math.log(max(low, 0.5)), math.log(high))) if d.log else (
            rng.uniform(low, high))
        x = d.low + round((x - d.low) / d.step) * d.step
        return int(min(max(x, d.low), d.high))
    if isinstance(d, FloatDistribution):
        if d.log:
            return float(math.exp(rng.uniform(math.log(d.low), math.log(d.high))))
        x = rng.uniform(d.low, d.high)
        if d.step is not None:
            x = min(d.low + round((x - d.low) / d.step) * d.step, d.high)
        return float(x)
    raise TypeError(f"cannot sample {type(d).__name__}")
