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
