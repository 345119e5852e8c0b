"""The GA3C notebook's verdicts from hand-made measurements: every claim's number and verdict
follows from the rates, returns, lags and traces given (``lab.experiments.ga3c.verdict``)."""

import numpy as np

from lab.experiments import ga3c as experiment
from lab.train.ga3c import Result
from tests.test_ga3c import NOTEBOOK


def run(seconds=10.0, env_steps=1000, trainings=10, returns=(), lags=(), trace=()):
    """A host run's ``Result``: episodes ending evenly through the run with ``returns``."""
    t = np.linspace(0, seconds, len(returns) + 2)[1:-1]
    episodes = np.stack([t, t * 100, returns], axis=1) if len(returns) else np.zeros((0, 3))
    return Result(None, seconds, env_steps, env_steps, trainings, episodes,
                  np.array(lags, int), np.ones(3, int), np.full(3, 1e-3),
                  np.array(trace, float).reshape(-1, 5))


def row(execution, agents, steps_per_s, trainings_per_s, lag, trainers=1, study="agents"):
    return {"execution": execution, "agents": agents, "trainers": trainers, "study": study,
            "env_steps_per_s": steps_per_s, "trainings_per_s": trainings_per_s,
            "lag_mean": lag}


RATES = {"rows": [
    row("ga3c", 1, 1000, 20, 0.1), row("a3c", 1, 900, 150, 0.0),
    row("ga3c", 4, 3000, 60, 0.5), row("a3c", 4, 1000, 180, 0.0),
    row("ga3c", 16, 5000, 100, 2.0), row("a3c", 16, 1000, 190, 0.0),
    row("ga3c", 16, 5000, 100, 2.0, trainers=1, study="trainers"),
    row("ga3c", 16, 4800, 96, 3.0, trainers=4, study="trainers")]}


def test_claims_follow_the_measurements():
    setup = experiment.configure(**(NOTEBOOK | {"seeds": 2}))
    learned = {"ga3c": [run(returns=[0, 0, 0, 0, 2.0]), run(returns=[0, 0, 0, 0, 1.0])],
               "a3c": [run(returns=[0, 0, 0, 0, 1.0]), run(returns=[0, 0, 0, 0, 1.5])],
               "a2c": [run(env_steps=40_000, returns=[5.0] * 5)] * 2}
    lags = {0: np.full((1, 40), 3.0), 1: np.full((1, 40), 1.0)}
    adjusted = [run(trace=[[t, 8, 1, 1, 95.0] for t in range(4)])]
    m = experiment.verdict(setup, learned, RATES, lags, adjusted)

    # (1) GA3C ahead at 4 and 16 agents, peaking at 16: 5000 / 1000
    assert m["claim1_ga3c_faster"] and m["ga3c_peak_agents"] == 16
    assert m["ga3c_over_a3c_at_16"] == 5.0
    # (2) the last fifth of each run holds its last episode: GA3C (2 + 1) / 2 = 1.5 against
    # A3C's (1 + 1.5) / 2 = 1.25, ahead on one seed of two: "weakly"
    assert m["ga3c_final_return"] == 1.5 and m["a3c_final_return"] == 1.25
    assert m["claim2_ga3c_higher_return"] and m["seeds_ga3c_ahead"] == 1
    assert m["a2c_over_ga3c_env_steps"] == 40.0
    # (3) lag 0.1 -> 2.0 with agents and 2.0 -> 3.0 with trainers; lag 1 ends lower than 0
    assert m["claim3_lag_grows"] and m["claim3_large_lag_hurts"]
    # (4) 95 of the best fixed GA3C configuration's 100 trainings per second (A3C's own,
    # higher, trainings of t_max steps are not GA3C configurations)
    assert m["best_fixed_trainings_per_s"] == 100 and m["adjusted_fraction_of_best"] == [0.95]
    assert m["claim4_adjustment_reaches_90pc"]

    out = experiment.summary(m, setup)
    verdicts = {c["name"]: c["verdict"] for c in out["claims"]}
    assert verdicts == {"batching_faster": "holds", "higher_return_at_equal_time": "weakly",
                        "lag_grows": "holds", "large_lag_hurts": "holds",
                        "adjustment_reaches_90pc": "holds"}
    assert "jitted A2C" in experiment.describe(m)


def test_atari_runs_leave_the_jitted_a2c_claims_untested():
    setup = experiment.configure(**(NOTEBOOK | {"preset": "gpu_atari", "game": "pong"}))
    learned = {"ga3c": [run(returns=[-21.0] * 5)] * 3, "a3c": [run(returns=[-20.0] * 5)] * 3}
    adjusted = [run(trace=[[t, 8, 1, 1, 80.0] for t in range(4)])]
    m = experiment.verdict(setup, learned, RATES, experiment.lag_study(setup), adjusted)
    assert "a2c_over_ga3c_env_steps" not in m and m["lags"] == []
    assert m["claim3_large_lag_hurts"] is None and not m["claim4_adjustment_reaches_90pc"]
    verdicts = {c["name"]: c["verdict"] for c in experiment.summary(m, setup)["claims"]}
    assert verdicts["large_lag_hurts"] == "not tested"
    assert verdicts["higher_return_at_equal_time"] == "does not hold"
    assert "Atari pong" in experiment.summary(m, setup)["study"]["measured"]
    assert "no lag study" in experiment.describe(m)
