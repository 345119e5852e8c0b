"""The GA3C notebook's verdicts from hand-made measurements: every claim's number and verdict
follows from the rates, returns, lags and traces given (``lab.experiments.ga3c.verdict``)."""

import json

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
                  np.array(trace, float).reshape(-1, 6))


def adjusted_run(*configs):
    """An adjusted run whose trace kept each of ``configs`` in turn (then one reverted)."""
    rows = [[10.0 + 20 * i, *c, 100.0, 1.0] for i, c in enumerate(configs)]
    return run(trace=rows + [[10.0 + 20 * len(configs), 99, 9, 9, 50.0, 0.0]])


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
    setup = experiment.configure(**(NOTEBOOK | {"seeds": 2, "adjust_seeds": 2,
                                                "adjust_starts": [[2, 1, 1], [32, 2, 2]]}))
    learned = {"ga3c": [run(returns=[0, 0, 0, 0, 2.0]), run(returns=[0, 0, 0, 0, 1.0])],
               "a3c": [run(returns=[0, 0, 0, 0, 1.0]), run(returns=[0, 0, 0, 0, 1.5])],
               "a2c": [run(env_steps=40_000, returns=[5.0] * 5)] * 2}
    lags = {0: np.full((1, 40), 3.0), 1: np.full((1, 40), 1.0)}
    # claim 4: fixed 16/1/1 is best (100); the two starts end on 16/1/1 (seed rates 95, 99)
    # and 8/1/1 (93, 89): fractions 0.95, 0.99 and 0.93, 0.89 -> every start's mean >= 0.9
    adjusted = [[adjusted_run((2, 1, 1), (16, 1, 1))] * 2,
                [adjusted_run((32, 2, 2), (8, 1, 1))] * 2]
    fixed = {"grid": {(8, 1, 1): [90.0, 90.0], (16, 1, 1): [98.0, 102.0]},
             "finals": [[95.0, 99.0], [93.0, 89.0]]}
    m = experiment.verdict(setup, learned, RATES, lags, adjusted, fixed)

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
    # (4) the last kept configuration is each run's final one, not the reverted 99/9/9
    assert m["adjusted_final_configs"] == [[[16, 1, 1]] * 2, [[8, 1, 1]] * 2]
    assert m["best_fixed_config"] == [16, 1, 1] and m["best_fixed_trainings_per_s"] == 100
    assert np.allclose(m["adjusted_fraction_of_best"], [0.97, 0.91])
    assert np.isclose(m["adjusted_fraction_pooled"], 0.94)
    assert m["claim4_adjustment_reaches_90pc"] and m["claim4_every_start"]
    assert m["adjusted_windows_kept"] == [[1, 1]] * 2 and m["adjusted_windows"] == [[2, 2]] * 2

    out = experiment.summary(m, setup)
    verdicts = {c["name"]: c["verdict"] for c in out["claims"]}
    assert verdicts == {"batching_faster": "holds", "higher_return_at_equal_time": "weakly",
                        "lag_grows": "holds", "large_lag_hurts": "holds",
                        "adjustment_reaches_90pc": "holds"}
    assert "jitted A2C" in experiment.describe(m)

    # one start below 0.9 with the pool above: weakly; the pool below: does not hold
    for finals, verdict in (([[99.0, 99.0], [88.0, 88.0]], "weakly"),
                            ([[89.0, 89.0], [88.0, 88.0]], "does not hold")):
        m = experiment.verdict(setup, learned, RATES, lags, adjusted,
                               fixed | {"finals": finals})
        verdicts = {c["name"]: c["verdict"] for c in experiment.summary(m, setup)["claims"]}
        assert verdicts["adjustment_reaches_90pc"] == verdict


def test_atari_runs_leave_the_jitted_a2c_claims_untested():
    setup = experiment.configure(**(NOTEBOOK | {"preset": "gpu_atari", "game": "pong"}))
    learned = {"ga3c": [run(returns=[-21.0] * 5)] * 3, "a3c": [run(returns=[-20.0] * 5)] * 3}
    adjusted = [[adjusted_run((8, 1, 1))]] * 3  # the preset's three starts, one seed
    fixed = {"grid": {(16, 2, 2): [100.0]}, "finals": [[80.0]] * 3}
    m = experiment.verdict(setup, learned, RATES, experiment.lag_study(setup), adjusted, fixed)
    assert "a2c_over_ga3c_env_steps" not in m and m["lags"] == []
    assert m["claim3_large_lag_hurts"] is None and not m["claim4_adjustment_reaches_90pc"]
    verdicts = {c["name"]: c["verdict"] for c in experiment.summary(m, setup)["claims"]}
    assert verdicts["large_lag_hurts"] == "not tested"
    assert verdicts["higher_return_at_equal_time"] == "does not hold"
    assert "Atari pong" in experiment.summary(m, setup)["study"]["measured"]
    assert "no lag study" in experiment.describe(m)


def test_kept_measurements_are_reused_only_for_the_same_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path))
    setup = experiment.configure(**(NOTEBOOK | {"checkpoint": True}))
    calls, reused = [], []

    def measure():
        calls.append(1)
        return {"rate": 10.0 * len(calls)}

    first = experiment._kept(setup, "fixed", measure, reused, counts=(2, 1, 1), seed=0)
    again = experiment._kept(setup, "fixed", measure, reused, counts=(2, 1, 1), seed=0)
    other = experiment._kept(setup, "fixed", measure, reused, counts=(2, 1, 1), seed=1)
    assert first["rate"] == again["rate"] == 10.0 and other["rate"] == 20.0
    assert len(calls) == 2 and len(reused) == 1 and "seed': 0" in reused[0]
    other_host = experiment.configure(**(NOTEBOOK | {"checkpoint": True,
                                                     "training_batch": 20}))
    assert experiment._kept(other_host, "fixed", measure, [], counts=(2, 1, 1), seed=0)[
        "rate"] == 30.0  # another host setting is another measurement
    r = run(returns=[1.0, 2.0], lags=[0, 3], trace=[[10.0, 2, 1, 1, 5.0, 1.0]])
    back = experiment._as_result(json.loads(json.dumps(experiment._as_dict(r))))
    for field in Result._fields[1:]:  # a kept run comes back as it was, less its model
        assert np.array_equal(getattr(back, field), getattr(r, field)), field
    off = experiment.configure(**NOTEBOOK)
    assert experiment._kept(off, "fixed", measure, reused, counts=(2, 1, 1), seed=0)[
        "rate"] == 40.0 and len(reused) == 1  # checkpoint False measures every time
