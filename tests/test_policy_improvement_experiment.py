"""The policy-improvement experiment: variants from the parameters, verdicts from histories."""

import numpy as np
import pytest

from lab.experiments import policy_improvement as pi
from lab.train.rl_loop import History

PARAMS = dict(preset="default", env="Pendulum-v1", agent="search", depth=1, branching=4,
              model="true", search_in="learning", updates_per_step=1, more_updates=4,
              compare=True, seeds=5, total_steps=3000, eval_every=500, vmpo_steps=1_024_000,
              widths=64, batch_size=128, learning_rate=3e-4, n_step=5, discount=0.99)


def test_configure_compare_runs_the_claims_variants():
    setup = pi.configure(**PARAMS)
    names = [v.name for v in setup.variants]
    assert names == ["search_d1_true", "mpo", "mpo_x4", "vmpo"]
    assert setup.focus == "search_d1_true"
    search = setup.variant("search_d1_true").config
    assert (search.depth, search.model, search.num_samples, search.branching) == (1, "true", 20, 4)
    assert setup.variant("mpo").config.depth == 0
    assert setup.variant("mpo_x4").config.updates_per_step == 4
    alone = pi.configure(**PARAMS | dict(agent="mpo", compare=False))
    assert [v.name for v in alone.variants] == ["mpo"]


@pytest.mark.parametrize("fields, message", [
    (dict(preset="fast"), "unknown preset 'fast'"),
    (dict(more_updates=1), "more_updates (1) must exceed updates_per_step (1)"),
    (dict(seeds=0), "seeds must be at least 1"),
    (dict(env="dmc:cartpole_swingup", compare=False, model="learned", agent="vmpo"),
     "V-MPO and the comparison need vectorised JAX environments"),
])
def test_configure_errors(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pi.configure(**PARAMS | fields)


def _result(setup, name, curve, kl_mean=1e-2, kl_stddev=5e-5):
    steps = np.arange(len(curve)) * 1000
    returns = np.stack([np.asarray(curve, float) + d for d in (-10.0, 10.0)])
    e = len(curve) - 1
    metrics = {"kl_mean": np.full((2, e, 1), kl_mean), "kl_stddev": np.full((2, e, 1), kl_stddev),
               "temperature": np.ones((2, e))}
    history = History(steps, returns, np.arange(len(curve)) * 2.0, 1.0, metrics)
    return pi.Result(setup.variant(name), None, history)


def test_verdict_states_each_claim_from_the_curves():
    setup = pi.configure(**PARAMS)
    results = [
        _result(setup, "mpo", [-1200, -800, -400, -190, -150]),
        _result(setup, "search_d1_true", [-1200, -500, -180, -160, -150]),
        _result(setup, "mpo_x4", [-1200, -900, -600, -300, -250]),
        _result(setup, "vmpo", [-1200, -700, -300, -250, -210], kl_mean=2e-2, kl_stddev=2e-4),
    ]
    m = pi.verdict(setup, results)
    assert m["claim1_mpo_solves"] is True and m["mpo_final_return"] == -150
    assert m["mpo_steps_to_threshold"] == 3000 and m["search_d1_true_steps_to_threshold"] == 2000
    assert m["claim2_search_sooner"] is True
    assert m["mpo_x4_steps_to_threshold"] is None and m["claim3_more_updates_sooner"] is False
    assert m["claim4_vmpo_learns"] is False
    assert m["vmpo_kl_mean_over_epsilon"] == pytest.approx(2e-2 / setup.variant(
        "vmpo").config.epsilon_mean)
    text = pi.describe(m)
    assert "Claim 2" in text and "at 2,000 steps" in text and "never" in text


def test_steps_to_threshold():
    steps = np.array([0, 10, 20])
    assert pi.steps_to_threshold(steps, np.array([-5.0, 1.0, 0.5]), 0.0) == 10
    assert pi.steps_to_threshold(steps, np.array([-5.0, -1.0, -0.5]), 0.0) == float("inf")


def test_mean_return_over_steps_is_the_trapezoid_over_steps():
    steps = np.array([0, 250, 500, 1000])  # an uneven grid: the last interval weighs double
    returns = np.array([-1000.0, -600.0, -400.0, -200.0])
    # (-1600 / 2 * 250 - 1000 / 2 * 250 - 600 / 2 * 500) / 1000
    assert pi.mean_return_over_steps(steps, returns) == pytest.approx(-475.0)


def test_paired_t_test_matches_the_closed_form_at_two_degrees_of_freedom():
    t, p = pi.paired_t_test([1.0, 2.0, 3.0])  # mean 2, sd 1: t = 2 sqrt(3)
    assert t == pytest.approx(2 * np.sqrt(3))
    # with 2 degrees of freedom P(T > t) = 1/2 - t / (2 sqrt(t^2 + 2))
    assert p == pytest.approx(0.5 - t / (2 * np.sqrt(t**2 + 2)))
    assert pi.paired_t_test([-1.0, -2.0, -3.0])[1] == pytest.approx(1 - p)
    assert pi.paired_t_test([250.0, 250.0]) == (np.inf, 0.0)  # no spread, all ahead
    assert pi.paired_t_test([0.0, 0.0, 0.0]) == (0.0, 0.5)
    assert pi.paired_t_test([5.0]) == (None, None)  # one seed: no paired test


@pytest.mark.parametrize("p_area, p_steps, mean_area, mean_steps, expected", [
    (0.01, 0.02, 50.0, 500.0, "holds"),
    (0.01, 0.30, 50.0, 100.0, "weakly"),  # one significant, the other the same way
    (0.30, 0.01, 0.0, 100.0, "weakly"),
    (0.01, 0.90, 50.0, -100.0, "does not hold"),  # the other points the other way
    (0.20, 0.30, 50.0, 100.0, "does not hold"),
    (None, None, 50.0, 100.0, "not tested"),
])
def test_efficiency_verdict(p_area, p_steps, mean_area, mean_steps, expected):
    assert pi.efficiency_verdict(p_area, p_steps, mean_area, mean_steps) == expected


def _seeds_result(setup, name, curves, every=250):
    returns = np.asarray(curves, float)
    s, e = returns.shape[0], returns.shape[1] - 1
    metrics = {"kl_mean": np.full((s, e, 1), 1e-2), "kl_stddev": np.full((s, e, 1), 5e-5),
               "temperature": np.ones((s, e))}
    history = History(np.arange(e + 1) * every, returns, np.arange(e + 1) * 2.0, 1.0, metrics)
    return pi.Result(setup.variant(name), None, history)


def test_verdict_pairs_seeds_where_the_seed_mean_curve_ties():
    """The review's case: the seed-mean curves first cross together (the old measure: does
    not hold), while per seed 4 updates cross sooner or at the same step and gain area."""
    setup = pi.configure(**PARAMS | dict(seeds=3, total_steps=1000, eval_every=250))
    results = [
        _seeds_result(setup, "mpo", [[-1000, -800, -300, -190, -150],     # crosses at 750
                                     [-1000, -700, -250, -180, -150],     # 750
                                     [-1000, -900, -500, -300, -190]]),   # 1000
        _seeds_result(setup, "mpo_x4", [[-1000, -600, -190, -150, -140],  # 500
                                        [-1000, -500, -200, -160, -150],  # 500
                                        [-1000, -700, -450, -320, -180]]),  # 1000
        _seeds_result(setup, "search_d1_true", [[-1000, -500, -190, -150, -140],  # 500
                                                [-1000, -500, -150, -140, -130],  # 500
                                                [-1000, -600, -300, -190, -150]]),  # 750
    ]
    m = pi.verdict(setup, results)
    assert m["mpo_steps_to_threshold"] == m["mpo_x4_steps_to_threshold"] == 1000
    assert m["claim3_more_updates_sooner"] is False  # the old measure
    assert m["mpo_seed_steps_to_threshold"] == [750, 750, 1000]
    # the trapezoid's mean over [0, 1000]: (f0 / 2 + f1 + f2 + f3 + f4 / 2) / 4
    assert m["mpo_seed_mean_return_over_steps"] == pytest.approx([-466.25, -426.25, -573.75])
    assert m["claim3_area_gain_per_seed"] == pytest.approx([88.75, 67.5, 58.75])
    assert m["claim3_steps_saved_per_seed"] == [250, 250, 0]
    t_steps = 2.0  # mean 166.7, sd 144.3, standard error 83.3
    assert m["claim3_steps_t"] == pytest.approx(t_steps)
    assert m["claim3_steps_p"] == pytest.approx(0.5 - t_steps / (2 * np.sqrt(t_steps**2 + 2)))
    assert m["claim3_area_p"] < 0.05 < m["claim3_steps_p"]
    assert m["claim3_verdict"] == "weakly"
    # search: 250 steps saved on every seed (no spread: p 0), area ahead on every seed
    assert m["claim2_steps_saved_per_seed"] == [250, 250, 250] and m["claim2_steps_p"] == 0
    assert m["claim2_steps_t"] is None  # infinite: JSON has none
    assert m["claim2_area_gain_per_seed"] == pytest.approx([113.75, 87.5, 157.5])
    assert m["claim2_area_p"] < 0.05 and m["claim2_verdict"] == "holds"
    claims = {c["name"]: c for c in pi.summary(m)["claims"]}
    assert claims["more_updates_sooner"]["verdict"] == "too small to decide here"  # 1,000 steps
    assert ["measured verdict", "weakly"] in claims["more_updates_sooner"]["numbers"]
    assert ["first crossing per seed: mpo_x4", "500, 500, 1000"] in \
        claims["more_updates_sooner"]["numbers"]
    text = pi.describe(m)
    assert "0.5k, 0.5k, 1k against 0.75k, 0.75k, 1k" in text and "at 1,000 steps" in text
    assert "t = inf, p = 0" in text


def test_paired_efficiency_counts_never_after_the_run():
    m = {"a_seed_steps_to_threshold": [None, 500.0], "b_seed_steps_to_threshold": [750.0, None],
         "a_seed_mean_return_over_steps": [-300.0, -200.0],
         "b_seed_mean_return_over_steps": [-400.0, -400.0]}
    out = pi.paired_efficiency(m, "a", "b", never_at=1250.0)
    assert out["steps_saved_per_seed"] == [750.0 - 1250.0, 1250.0 - 500.0]
    assert out["area_gain_per_seed"] == [100.0, 200.0]
    assert out["steps_never_counted_at"] == 1250.0
