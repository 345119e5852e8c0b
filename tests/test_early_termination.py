"""Notebook 08's pieces (``lab.experiments.early_termination``) on hand-made curves: phase
values, rank correlations, settings that mislead, the configurations a live sweep draws,
refused parameters; and one small live sweep against the simulator's prediction."""

import numpy as np
import pytest

from lab.experiments import early_termination as et
from lab.sweeps.simulator import Curves, save_curves

SPEC = et.a2c_spec(game="breakout", envs=2, seeds=1, total_steps=80, evaluations=2,
                   phases=2, survival=0.5, trials=2, workers=2)


def test_phase_values_are_the_seed_mean_at_each_phase_end():
    e = np.arange(16.0).reshape(2, 2, 4)  # 2 configurations, 2 seeds, 4 evaluations
    np.testing.assert_array_equal(et.phase_values(e, 2), [[3, 5], [11, 13]])
    with pytest.raises(ValueError, match="4 evaluations do not split into 3 phases"):
        et.phase_values(e, 3)


def test_rank_correlations_by_hand():
    final = np.array([1.0, 2.0, 3.0, 4.0])
    e = np.stack([final[::-1], [2.0, 1.0, 3.0, 4.0], final], axis=1)[:, None, :]
    r = et.correlations(e)
    np.testing.assert_allclose(r["spearman"], [-1.0, 0.8, 1.0])
    np.testing.assert_allclose(r["kendall"], [-1.0, 4 / 6, 1.0])  # one discordant pair of 6


def test_settings_that_look_good_early_and_end_low():
    params = tuple({"learning_rate": 1e-3, "t_max": 5, "discount": d}
                   for d in (0.9, 0.9, 0.99, 0.99))
    values = np.array([[4.0, 1.0], [3.0, 2.0], [2.0, 3.0], [1.0, 4.0]])
    rows = et.misleading(Curves(SPEC, params, values))
    by = {(r["parameter"], r["value"]): r for r in rows}
    # discount 0.9: percentiles early 1 and 2/3, final 0 and 1/3
    assert by["discount", "0.9"]["early_minus_final"] == pytest.approx(2 / 3)
    assert by["discount", "0.99"]["early_minus_final"] == pytest.approx(-2 / 3)
    assert by["t_max", "2-7.37"]["configurations"] == 4  # log-spaced bins of [2, 100]


def test_break_even_keeps_the_finals_and_spans_exact_to_reversed_early_ranks():
    params = tuple({"learning_rate": 1e-3, "t_max": 5, "discount": 0.99} for _ in range(16))
    spec = et.a2c_spec(game="breakout", envs=2, seeds=1, total_steps=80, evaluations=4,
                       phases=4, survival=0.5, trials=2, workers=2)
    final = np.arange(16.0)
    curves = Curves(spec, params, np.tile(final[:, None], (1, 4)))
    rows = et.break_even(curves, noise=(0.0, 100.0), orders=20, workers=2)
    assert [r["level"] for r in rows] == ["noise 0", "noise 100", "reversed"]
    assert rows[0]["spearman_phase1"] == pytest.approx(1.0)
    assert rows[-1]["spearman_phase1"] == pytest.approx(-1.0)
    # early rank = final rank: HyperTrick is at least random search on every order, and
    # spends less than the 16 trials random search runs; reversed, it keeps the worst
    assert rows[0]["hypertrick_at_least_random"] == 1.0
    assert rows[0]["hypertrick_compute"] < 16 == rows[0]["none_compute"]
    assert rows[-1]["hypertrick_at_least_random"] < 0.5
    # 20 of 20 orders: the Wilson interval's upper end is 1, its lower 20 / (20 + 1.96^2)
    assert rows[0]["hypertrick_at_least_random_ci"] == pytest.approx([20 / 23.8415, 1.0],
                                                                     abs=1e-4)


def test_a_share_s_interval_is_wilson_s_score_interval():
    # 8 of 10 by hand: centre (0.8 + z^2 / 20) / (1 + z^2 / 10) = 0.7167, half-width
    # z sqrt(0.8 x 0.2 / 10 + z^2 / 400) / (1 + z^2 / 10) = 0.2266, z = 1.96
    assert et.share_interval(np.arange(10) < 8) == pytest.approx([0.4902, 0.9433], abs=2e-4)


def test_the_threshold_is_the_lowest_rho_from_which_on_every_level_pays():
    rows = [{"spearman_phase1": rho, "hypertrick_at_least_random": share}
            for rho, share in ((1.0, 1.0), (0.8, 0.9), (0.5, 0.4), (0.3, 0.6), (-1.0, 0.0))]
    assert et.threshold(rows) == 0.8  # 0.3 pays again, but 0.5 between does not
    assert et.threshold(rows, share=0.95) == 1.0
    assert et.threshold(rows, share=1.01) is None


def test_the_configurations_are_the_ones_a_live_sweep_draws():
    configs = et.sample_configs(SPEC, 20, seed=3)
    assert configs == et.sample_configs(SPEC, 20, seed=3) != et.sample_configs(SPEC, 20, 4)
    assert all(isinstance(c["t_max"], int) and 2 <= c["t_max"] <= 100 for c in configs)
    assert all(1e-5 <= c["learning_rate"] <= 1e-2 for c in configs)
    assert {c["discount"] for c in configs} <= set(et.A2C_SPACE["discount"]["values"])


NOTEBOOK = {"preset": "default", "game": "breakout", "configurations": 3, "seeds": 1,
            "envs": 2, "total_steps": 80, "evaluations": 2, "phases": 2, "survival": 0.5,
            "workers": 2, "orders": 3, "mpo_configurations": 3, "mpo_total_steps": 200,
            "mpo_eval_every": 100, "mpo_fixed": {}, "live_trials": 0, "sampler_seed": 0,
            "curves_from": ""}


@pytest.mark.parametrize("change, message", [
    ({"evaluations": 3}, r"evaluations \(3\) must be a multiple of phases \(2\)"),
    ({"configurations": 2}, "configurations and mpo_configurations must be at least 3"),
    ({"live_trials": 4}, r"live_trials must be between 0 \(no live sweep\) and configurations"),
    ({"mpo_total_steps": 300}, r"mpo_total_steps \(300\) must be a multiple of phases"),
    ({"workers": 0}, "workers must be at least 1, got 0"),
    ({"curves_from": "nowhere.json"}, "curve file nowhere.json does not exist"),
    ({"preset": "huge"}, "unknown preset 'huge'; choose one of default, claim"),
])
def test_bad_parameters_are_refused_before_any_work(change, message):
    et.configure(**NOTEBOOK)
    with pytest.raises(ValueError, match=message):
        et.configure(**(NOTEBOOK | change))


def test_curves_of_another_sweep_are_refused(tmp_path):
    other = et.a2c_spec(game="breakout", envs=2, seeds=1, total_steps=80, evaluations=4,
                        phases=4, survival=0.5, trials=2, workers=2)
    params = tuple(et.sample_configs(other, 3, 0))
    path = save_curves(tmp_path / "a2c_curves.json", Curves(other, params, np.ones((3, 4))))
    with pytest.raises(ValueError, match="holds curves of another sweep"):
        et.configure(**(NOTEBOOK | {"curves_from": str(path)}))


@pytest.mark.slow
def test_a_live_sweep_lands_where_the_simulator_predicts(tmp_path):
    """Two trials of notebook 07 under HyperTrick (2 worker processes), then random search on
    its compute; the recorded curves of the same configurations (trained beside each other,
    the live trials alone: common random numbers give both the same returns) predict each
    outcome exactly: the compute, HyperTrick's best and random search's best are each one of
    the values the replays over worker timings give."""
    spec = et.a2c_spec(game="breakout", envs=2, seeds=1, total_steps=400, evaluations=2,
                       phases=2, survival=0.5, trials=2, workers=2, name="live-test")
    curves = et.a2c_curves(spec, et.sample_configs(spec, 2, 0))
    prediction = et.predict_live(curves, 2, workers=2, replays=20)
    live = et.live(spec, tmp_path)
    for key in ("hypertrick_compute", "hypertrick_best", "random_best"):
        assert np.isclose(live[key], prediction[key], rtol=1e-5, atol=1e-6).any(), \
            (key, live[key], sorted(set(prediction[key].round(6))))


def test_displacement_breaks_tied_first_phases_against_the_claim():
    values = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    assert et.displacement(values) == [0.0, 0.0, 0.0]  # the first phase ranks as the end
    tied = np.array([[5.0, 1.0], [5.0, 2.0], [5.0, 3.0]])
    assert et.displacement(tied) == [1.0, 0.0, 1.0]  # no ranking: read as reversed
    assert et.random_displacement(3) == pytest.approx(4 / 9)
    assert et.outside(6.2, [6.0, 6.1, 6.15]) == pytest.approx(0.05)
    assert et.outside(6.1, [6.0, 6.1, 6.15]) == 0.0


def _record(setup, values, orders=6):
    """A run's numbers from hand-made curves (phase values = the evaluations, 1 seed)."""
    params = tuple(et.sample_configs(setup.a2c, len(values), 0))
    a2c = Curves(setup.a2c, params, values, values[:, None, :])
    mpo = Curves(setup.mpo, tuple(et.sample_configs(setup.mpo, len(values), 0)), values,
                 values[:, None, :])
    sim = et.simulate(a2c, orders=orders, workers=2, methods=("hypertrick", "none"))
    mpo_sim = et.simulate(mpo, orders=orders, workers=2, methods=("hypertrick", "none"))
    m = et.verdict(a2c, mpo, sim, None, None, mpo_sim)
    return m | {"a2c_curves": et.plain(a2c), "mpo_curves": et.plain(mpo), "orders": orders}


def test_claims_are_decided_per_order_and_per_configuration():
    setup = et.configure(**NOTEBOOK)
    final = np.arange(12.0)
    m = _record(setup, np.column_stack([final, final]))  # the first phase ranks exactly
    claims = {c["name"]: c for c in et.summary(m)["claims"]}
    assert claims["early_phases_predict"]["values"] == [0.0] * 12
    assert claims["early_phases_predict"]["verdict"] == "holds"  # 12 of 12 below 13/36
    ht = claims["as_good_on_less_compute"]
    assert ht["n"] == 6 and ht["family"] == "as_good_on_less_compute"
    assert ht["effect"] >= 0.02 - 1e-12  # never below random search: margin kept
    reversed_first = np.column_stack([final[::-1], final])
    m = _record(setup, reversed_first)
    claims = {c["name"]: c for c in et.summary(m)["claims"]}
    assert claims["early_phases_predict"]["verdict"] == "does not hold"
    assert "simulator_predicts_live" not in claims  # no live sweep in this run
    text = et.describe(m)
    assert "does not hold" in text and "weakly" not in text


def test_rederive_recomputes_the_per_unit_numbers_an_old_record_lacks():
    setup = et.configure(**NOTEBOOK)
    rng = np.random.default_rng(1)
    values = np.sort(rng.normal(size=(10, 2)), axis=1)
    m = _record(setup, values)
    now = {c["name"]: c for c in et.summary(m)["claims"]}
    old = {k: v for k, v in m.items() if not k.startswith(("a2c_order", "mpo_order")) and
           not k.endswith(("_phase1_displacement", "_final_range"))}
    again = {c["name"]: c for c in et.rederive(old, NOTEBOOK)["claims"]}
    for name in now:
        assert np.allclose(again[name]["values"], now[name]["values"])
        assert again[name]["verdict"] == now[name]["verdict"]


def test_kept_units_are_read_back_and_an_unfinished_group_continues(tmp_path, monkeypatch):
    """With ``checkpoint`` each t_max group's curves are kept (here on a stand-in for the
    A2C: a state that counts up, its returns read from the state); a rerun reads them back
    without training, a group stopped mid-way continues from its saved state to the same
    numbers, other sizes train anew; the live sweep's result is kept the same way."""
    from types import SimpleNamespace

    import jax.numpy as jnp

    from lab.experiments import a2c
    from lab.experiments import sweeps as sweep_module

    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path / "kept"))
    monkeypatch.setattr(et.a2c, "SAVE_SECONDS", 0.0)
    setup = et.configure(**(NOTEBOOK | {"checkpoint": True, "evaluations": 4}))
    calls = []

    def initial(config, task, configs, seeds, seed):
        return {"x": jnp.arange(len(configs) * seeds, dtype=jnp.float32) / 3}

    def chunk(config, task, updates):
        def step(state):
            calls.append(config.t_max)
            if calls == stop:
                raise KeyboardInterrupt  # a deadline
            x = state["x"] + config.t_max
            return {"x": x}, SimpleNamespace(episodes=np.ones((len(x), 2)),
                                             episode_return=np.repeat(np.asarray(x)[:, None], 2, 1))
        return step

    monkeypatch.setattr(a2c, "_initial_runs", initial)
    monkeypatch.setattr(a2c, "_chunk", chunk)
    configs = et.sample_configs(setup.a2c, 3, 0)
    stop = [int(min(c["t_max"] for c in configs))] * 3  # the first group's third evaluation
    with pytest.raises(KeyboardInterrupt):
        et.a2c_curves(setup.a2c, configs, kept=et.kept(setup, "a2c"))
    stop = None
    assert len(list((tmp_path / "kept").rglob("*.state"))) == 1  # its evaluations 1 and 2
    calls.clear()
    first = et.kept(setup, "a2c")
    curves = et.a2c_curves(setup.a2c, configs, kept=first)
    groups = len({c["t_max"] for c in configs})
    assert len(calls) == 4 * groups - 2 and first.made == groups  # continued at evaluation 3
    assert not list((tmp_path / "kept").rglob("*.state"))
    x, expected = np.arange(3.0, dtype=np.float32) / 3, []  # an uninterrupted run's
    for _ in range(4):
        x = x + np.array([c["t_max"] for c in configs], np.float32)
        expected.append(x)
    expected = np.stack(expected, axis=1)
    np.testing.assert_array_equal(curves.evaluations[:, 0], expected)

    def never(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(a2c, "_initial_runs", never)
    monkeypatch.setattr(a2c, "_chunk", never)
    again = et.kept(setup, "a2c")
    np.testing.assert_array_equal(et.a2c_curves(setup.a2c, configs, kept=again).evaluations,
                                  curves.evaluations)
    assert (again.loaded, again.made) == (groups, 0)
    other = et.configure(**(NOTEBOOK | {"checkpoint": True, "evaluations": 4,
                                        "total_steps": 160}))
    with pytest.raises(AssertionError, match="trained again"):  # another size: anew
        et.a2c_curves(other.a2c, configs, kept=et.kept(other, "a2c"))
    assert et.kept(et.configure(**NOTEBOOK), "a2c").folder is None  # off: nothing kept

    runs = tmp_path / "run"
    pair = {"hypertrick_seconds": 1.5, "random_seconds": 2.5}
    reused = []
    monkeypatch.setattr(sweep_module, "compare",
                        lambda *args, **kwargs: reused.append(kwargs["reuse"]) or pair)
    monkeypatch.setattr(sweep_module, "verdict", lambda spec, pairs: {
        "comparisons": [{"hypertrick_best": float("nan"), "random_best": 6.0}],
        "hypertrick_seconds": [1.5], "random_seconds": [2.5]})
    live = et.live(setup.a2c, runs, kept=et.kept(setup, "live"))
    assert reused == [True]  # kept: each study of the pair is read back once finished
    monkeypatch.setattr(sweep_module, "compare", never)
    kept_live = et.kept(setup, "live")
    back = et.live(setup.a2c, runs, kept=kept_live)
    assert kept_live.loaded == 1 and np.isnan(back.pop("hypertrick_best"))
    assert back == {k: v for k, v in live.items() if k != "hypertrick_best"}


def test_a_finished_study_is_read_back_and_an_unfinished_one_set_aside(tmp_path, monkeypatch):
    import dataclasses

    from lab.experiments import sweeps as sweep_module
    from lab.sweeps import study as studies

    spec = et.configure(**NOTEBOOK).a2c
    spec = dataclasses.replace(spec, name="live-hypertrick-seed0", trials=2)
    ran = []

    def sweep(spec, *, out, storage=None, stop=False):  # a sweep of two trials, no kernels
        ran.append(spec.name)
        study = studies.create(spec, studies.default_storage(out, spec.name))
        if stop:
            raise KeyboardInterrupt  # a deadline before its trials ran
        for _ in range(spec.trials):
            study.tell(study.ask(), 1.0)
        return study

    monkeypatch.setattr(sweep_module, "run_sweep", lambda *a, **k: sweep(*a, **k, stop=True))
    with pytest.raises(KeyboardInterrupt):
        sweep_module._sweep(spec, tmp_path, None, True)
    db = tmp_path / "sweeps" / "live-hypertrick-seed0.db"
    monkeypatch.setattr(sweep_module, "run_sweep", sweep)
    study, seconds = sweep_module._sweep(spec, tmp_path, None, True)  # unfinished: anew
    assert db.with_suffix(".interrupted.db").exists() and len(study.trials) == 2
    monkeypatch.setattr(sweep_module, "run_sweep", None)  # finished: read back
    again, seconds_again = sweep_module._sweep(spec, tmp_path, None, True)
    assert seconds_again == seconds and [t.value for t in again.trials] == [1.0, 1.0]
    assert ran == ["live-hypertrick-seed0"] * 2
    # a resumed run: the runner moved the attempt's files, studies too, to attempts/<n>/
    from lab.runs.runner import ATTEMPTS

    (tmp_path / ATTEMPTS / "1").mkdir(parents=True)
    (tmp_path / "sweeps").rename(tmp_path / ATTEMPTS / "1" / "sweeps")
    (tmp_path / ATTEMPTS / "2" / "sweeps").mkdir(parents=True)  # a later one, unfinished
    again, seconds_again = sweep_module._sweep(spec, tmp_path, None, True)
    assert seconds_again == seconds and db.exists()  # moved back from attempt 1
    assert not (tmp_path / ATTEMPTS / "1" / "sweeps" / db.name).exists()
