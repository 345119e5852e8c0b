"""The policy-improvement experiment: variants from the parameters, verdicts from histories."""

from typing import NamedTuple

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
    assert m["mpo_final_return"] == -150 and m["mpo_final_returns"] == [-160, -140]
    assert m["mpo_steps_to_threshold"] == 3000 and m["search_d1_true_steps_to_threshold"] == 2000
    assert m["mpo_x4_steps_to_threshold"] is None
    epsilon = setup.variant("vmpo").config.epsilon_mean
    assert m["vmpo_kl_mean_over_epsilon"] == pytest.approx(2e-2 / epsilon)
    assert m["vmpo_seed_kl_mean_over_epsilon"] == pytest.approx([2e-2 / epsilon] * 2)
    claims = {c["name"]: c for c in pi.summary(m)["claims"]}
    assert list(claims) == ["mpo_solves", "search_sooner", "more_updates_sooner",
                            "vmpo_learns", "vmpo_kls_track"]
    assert all(c["verdict"] == "too small to decide here" for c in
               (claims["mpo_solves"], claims["search_sooner"], claims["more_updates_sooner"]))
    assert claims["vmpo_learns"]["values"] == [-220.0, -200.0]
    assert claims["vmpo_learns"]["threshold"] == -200
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
    assert m["mpo_seed_steps_to_threshold"] == [750, 750, 1000]
    # the trapezoid's mean over [0, 1000]: (f0 / 2 + f1 + f2 + f3 + f4 / 2) / 4
    assert m["mpo_seed_mean_return_over_steps"] == pytest.approx([-466.25, -426.25, -573.75])
    assert m["claim3_area_gain_per_seed"] == pytest.approx([88.75, 67.5, 58.75])
    assert m["claim3_steps_saved_per_seed"] == [250, 250, 0]
    # search: 250 steps saved on every seed, area ahead on every seed
    assert m["claim2_steps_saved_per_seed"] == [250, 250, 250]
    assert m["claim2_area_gain_per_seed"] == pytest.approx([113.75, 87.5, 157.5])
    claims = {c["name"]: c for c in pi.summary(m)["claims"]}
    more = claims["more_updates_sooner"]
    assert more["verdict"] == "too small to decide here"  # 1,000 steps, below 11,000
    # 167 steps saved on average, at most 250, but 3 seeds cannot rule out 1,000 (p >= 1/8)
    assert more["measured_verdict"] == "inconclusive"
    assert more["effect"] == pytest.approx(500 / 3)
    assert more["values"] == [[500, 750], [500, 750], [1000, 1000]]  # [variant, mpo] per seed
    assert ["first crossing per seed: mpo_x4", "500, 500, 1000"] in more["numbers"]
    text = pi.describe(m)
    assert "0.5k, 0.5k, 1k against 0.75k, 0.75k, 1k" in text and "at 1,000 steps" in text
    assert "too small to decide here (measured: inconclusive" in text
    assert "weakly" not in text


def test_paired_efficiency_counts_never_after_the_run():
    m = {"a_seed_steps_to_threshold": [None, 500.0], "b_seed_steps_to_threshold": [750.0, None],
         "a_seed_mean_return_over_steps": [-300.0, -200.0],
         "b_seed_mean_return_over_steps": [-400.0, -400.0]}
    out = pi.paired_efficiency(m, "a", "b", never_at=1250.0)
    assert out["steps_saved_per_seed"] == [750.0 - 1250.0, 1250.0 - 500.0]
    assert out["area_gain_per_seed"] == [100.0, 200.0]
    assert out["steps_never_counted_at"] == 1250.0


def _claim_run(mpo_steps, variant_steps, *, env_steps=20_000, seeds=5):
    """Hand-made numbers of a run whose seeds crossed -200 at the given steps."""
    m = {"env": "Pendulum-v1", "seeds": seeds, "threshold": -200.0,
         "variants": ["mpo", "mpo_x4"], "claim3_variant": "mpo_x4",
         "claim3_steps_never_counted_at": env_steps + 250}
    for name, crossed in (("mpo", mpo_steps), ("mpo_x4", variant_steps)):
        m |= {f"{name}_env_steps": env_steps, f"{name}_final_return": -150.0,
              f"{name}_final_returns": [-150.0] * seeds, f"{name}_steps_to_threshold": None,
              f"{name}_seed_steps_to_threshold": crossed,
              f"{name}_seed_mean_return_over_steps": [-500.0] * seeds,
              f"{name}_mean_return_over_evaluations": -500.0, f"{name}_train_seconds": 1.0}
    paired = pi.paired_efficiency(m, "mpo_x4", "mpo", m["claim3_steps_never_counted_at"])
    return m | {f"claim3_{k}": v for k, v in paired.items()}


def test_more_updates_sooner_by_the_shared_rule_on_hand_made_seeds():
    mpo = [13_000.0, 9_000.0, 7_250.0, 10_250.0, 8_000.0, 9_500.0, 11_000.0, 8_500.0]
    ahead = [x - 4_000 for x in mpo]  # every seed 4,000 steps sooner
    claim = {c["name"]: c for c in pi.summary(_claim_run(mpo, ahead, seeds=8))["claims"]}
    c = claim["more_updates_sooner"]
    assert c["verdict"] == "holds" and c["effect"] == pytest.approx(4_000)
    assert c["p"] == pytest.approx(1 / 256)  # exact sign-flip: all 8 seeds ahead
    # 5 seeds all ahead reach p = 1/32 at best: alone in the family that holds; beside
    # search_sooner (the claim runs) Holm doubles it to 1/16, above 0.05
    five = {c["name"]: c for c in pi.summary(_claim_run(mpo[:5], ahead[:5]))["claims"]}
    assert five["more_updates_sooner"]["verdict"] == "holds"
    assert five["more_updates_sooner"]["p"] == pytest.approx(1 / 32)
    # a sign flip: the variant 300 steps later on every seed rules the claimed 1,000 out
    later = [x + 300 for x in mpo]
    flip = {c["name"]: c for c in pi.summary(_claim_run(mpo, later, seeds=8))["claims"]}
    assert flip["more_updates_sooner"]["verdict"] == "does not hold"
    # MPO itself: every seed's final return -150, above -200
    assert claim["mpo_solves"]["verdict"] == "holds"


def test_rederive_reads_a_record_without_per_seed_kls():
    m = _claim_run([9_000.0] * 3, [5_000.0, 6_000.0, 7_000.0], seeds=3)
    m["variants"] = ["mpo", "mpo_x4", "vmpo"]
    m |= {"vmpo_final_returns": [-190.0, -180.0, -170.0], "vmpo_final_return": -180.0,
          "vmpo_env_steps": 1_024_000, "vmpo_kl_mean_over_epsilon": 0.9,
          "vmpo_kl_stddev_over_epsilon": 1.2}
    out = {c["name"]: c for c in pi.rederive(m, PARAMS | {"preset": "claim"})["claims"]}
    assert out["vmpo_kls_track"]["verdict"] == "not tested"
    assert "per-seed realised KLs" in out["vmpo_kls_track"]["to_remake"]
    assert out["more_updates_sooner"]["n"] == 3
    assert out["vmpo_learns"]["effect"] == pytest.approx(20.0)


def test_kl_doublings_is_the_farther_bound_in_factors_of_two():
    assert pi.kl_doublings({"mean": 1.0, "stddev": 1.0}) == 0.0
    assert pi.kl_doublings({"mean": 0.5, "stddev": 1.5}) == pytest.approx(1.0)
    assert pi.kl_doublings({"mean": 4.0, "stddev": 1.0}) == pytest.approx(2.0)


def test_train_keeps_each_variant_and_continues_an_unfinished_one(tmp_path, monkeypatch):
    """With ``checkpoint``: a stopped run continues from its last evaluation to the numbers of
    an uninterrupted one (``rl_loop.run_seeds``), a finished one is read back whole, and
    other sizes train anew. A jit-cheap fake agent stands in for MPO's networks."""
    import jax
    import jax.numpy as jnp

    from lab.train import mpo

    class Run(NamedTuple):
        agent: dict
        key: jax.Array

    def init_agent(config, task, key):
        return {"w": jax.random.normal(key, (2,))}

    def make_run(config, task):
        def init(key):
            k_agent, k_run = jax.random.split(key)
            return Run(init_agent(config, task, k_agent), k_run)

        def interval(run, first_step):
            key, k = jax.random.split(run.key)
            w = run.agent["w"] + jax.random.normal(k, (2,)) + first_step
            return Run({"w": w}, key), {"kl_mean": w[None], "kl_stddev": jnp.full((1,), jnp.nan)}

        def evaluate(run):
            key, k = jax.random.split(run.key)
            return Run(run.agent, key), jnp.sum(run.agent["w"]) + jax.random.normal(k)
        return init, interval, evaluate

    monkeypatch.setattr(mpo, "make_run", make_run)
    monkeypatch.setattr(mpo, "init_agent", init_agent)
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path))
    params = PARAMS | dict(agent="mpo", compare=False, seeds=2, total_steps=2000,
                           eval_every=500, checkpoint=True)
    setup = pi.configure(**params)
    variant = setup.variant("mpo")
    plain = pi.train(setup, variant).history  # nothing kept: mpo.train, as without checkpoint

    def same(a, b, timing=True):
        for field in ("env_steps", "returns") + (("seconds",) if timing else ()):
            x, y = getattr(a, field), getattr(b, field)
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
        assert a.metrics.keys() == b.metrics.keys()
        for k in a.metrics:
            assert a.metrics[k].dtype == b.metrics[k].dtype
            np.testing.assert_array_equal(a.metrics[k], b.metrics[k])

    units = pi.kept(setup)
    stopped = pi.train(setup, variant, callback=lambda h: len(h.env_steps) < 3, kept=units)
    assert len(stopped.history.env_steps) == 3 and (units.made, units.loaded) == (0, 0)
    seen, units = [], pi.kept(setup)
    made = pi.train(setup, variant, callback=seen.append, kept=units)  # from 1,000 steps on
    assert [int(h.env_steps[-1]) for h in seen] == [1500, 2000]
    assert (units.made, units.loaded) == (1, 0)
    same(made.history, plain, timing=False)

    def never(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(mpo, "make_run", never)
    units = pi.kept(setup)
    again = pi.train(setup, variant, kept=units)
    assert (units.made, units.loaded) == (0, 1)
    same(again.history, made.history)
    assert again.history.compile_seconds == made.history.compile_seconds
    np.testing.assert_array_equal(again.run.agent["w"], made.run.agent["w"])
    assert not list(tmp_path.rglob("*.state"))  # a finished variant keeps no run state
    other = pi.configure(**params | dict(total_steps=2500))
    with pytest.raises(AssertionError, match="trained again"):
        pi.train(other, other.variant("mpo"), kept=pi.kept(other))
