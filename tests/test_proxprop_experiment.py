"""The reproduction's bookkeeping: presets, divergence, tuning and the claims' verdicts."""

import json
from dataclasses import replace
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from lab.data import load
from lab.experiments import proxprop as experiment
from lab.experiments.proxprop import (
    Comparison,
    compare,
    configure,
    curves,
    describe,
    diverged,
    rederive,
    side_by_side,
    summary,
    tuned_index,
    verdict,
)
from lab.models import mlp
from lab.optim import ProxProp, value_and_direction
from lab.runs.claims import FAILS, HOLDS, INCONCLUSIVE, UNTESTED
from lab.runs.params import notebook_parameters
from lab.runs.verdict import mismatches
from lab.train import cross_entropy
from lab.train.proxprop import (
    Curves,
    ProxPropConfig,
    as_inputs,
    make_step,
    make_train,
    train_grid,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DEFAULTS = {name: p.default for name, p in notebook_parameters(
    ROOT / "notebooks/01_proxprop.ipynb").items()}


def _curves(train_loss):
    train_loss = np.asarray(train_loss, float)
    return Curves(train_loss, train_loss, np.zeros_like(train_loss))


def test_diverged_flags_nan_and_growth_in_any_seed():
    # (seeds=2, lrs=3, epochs+1=3): lr 0 converges, lr 1 blows up in one seed, lr 2 is NaN
    loss = [[[2, 1, 0.5], [2, 1, 3.0], [2, np.nan, np.nan]],
            [[2, 1, 0.4], [2, 1, 0.5], [2, 1, 1.0]]]
    np.testing.assert_array_equal(diverged(_curves(loss)), [False, True, True])


def test_tuned_index_takes_the_lowest_mean_final_loss_among_stable_lrs():
    loss = [[[2, 1, 0.5], [2, 1, 0.1], [2, 1, 0.01]],
            [[2, 1, 0.5], [2, 1, 0.2], [2, 1, 9.0]]]  # lr 2 diverged in seed 1
    assert tuned_index(_curves(loss)) == 1


def test_verdict_counts_epochs_and_rescued_step_sizes():
    lrs = np.array([0.1, 1.0])
    backprop = _curves([[[2, 1.0, 0.5], [2, np.nan, np.nan]]])
    proxprop = _curves([[[2, 0.8, 0.6], [2, 0.5, 0.2]]])
    v = verdict(Comparison(lrs, backprop, {"exact": proxprop}, {"BackProp": 1.0, "exact": 2.0}),
                early_epoch=1)
    assert v["backprop_tuned_lr"] == 0.1 and v["proxprop_tuned_lr"] == 1.0
    assert v["epochs_proxprop_lower"] == 2
    assert v["lrs_only_backprop_diverges"] == [1.0]
    assert v["proxprop_train_loss_epoch1"] == 0.5 and v["backprop_final_train_loss"] == 0.5
    # the claims' units: each seed's curve at the tuned step sizes
    assert v["backprop_train_loss_by_seed"] == [[2, 1.0, 0.5]]
    assert v["proxprop_train_loss_by_seed"] == [[2, 0.5, 0.2]]
    assert v["proxprop_trained_where_backprop_diverged_by_seed"] == [1.0]
    assert not any(k.startswith("claim_") for k in v)


def test_verdict_records_where_robustness_was_not_tested_or_failed():
    lrs = np.array([0.1])
    backprop = _curves([[[2, 0.5, 0.1]]])
    proxprop = _curves([[[2, 0.8, 0.05]]])
    v = verdict(Comparison(lrs, backprop, {"cg3": proxprop}, {"BackProp": 1.0, "cg3": 1.0}))
    assert v["epochs_proxprop_lower"] == 1
    # BackProp diverged nowhere: robustness was not tested, which is not the same as failed
    assert v["proxprop_trained_where_backprop_diverged_by_seed"] is None
    backprop = _curves([[[2, 0.5, 0.1], [2, np.nan, np.nan]], [[2, 0.5, 0.1], [2, 1, 3.0]]])
    proxprop = _curves([[[2, 0.8, 0.05], [2, np.nan, np.nan]], [[2, 0.8, 0.05], [2, 1, 0.5]]])
    v = verdict(Comparison(np.array([0.1, 1.0]), backprop, {"cg3": proxprop},
                           {"BackProp": 1.0, "cg3": 1.0}))
    # both diverged at 1.0 on seed 0; on seed 1 only BackProp did
    assert v["proxprop_trained_where_backprop_diverged_by_seed"] == [0.0, 1.0]


def _seeds(gain: list[float]) -> Curves:
    """BackProp at loss 1 after each epoch; ProxProp lower by ``gain[s]`` on seed ``s``; one
    step size, two epochs."""
    return [[[2.0, 1.0, 1.0]] for _ in gain], [[[2.0, 1 - g, 1 - g]] for g in gain]


@pytest.mark.parametrize("gain, expected", [
    ([0.5] * 6, HOLDS),  # every seed half BackProp's loss: p = 1/64
    ([0.5] * 3, INCONCLUSIVE),  # 3 seeds: a sign-flip test cannot go below 1/8
    ([0.5, 0.4, -0.3, 0.6, -0.2, 0.5], INCONCLUSIVE),  # a sign flip on two seeds
    ([-0.5, -0.3, -0.4, -0.35, -0.45], FAILS),  # behind on all five seeds: ruled out
])
def test_summary_decides_faster_per_epoch_from_the_per_seed_losses(gain, expected):
    bp, pp = _seeds(gain)
    result = Comparison(np.array([0.1]), _curves(bp), {"exact": _curves(pp)},
                        {"BackProp": 1.0, "exact": 1.0})
    setup = configure(**DEFAULTS | {"seeds": len(gain)})
    claims = {c["name"]: c for c in summary(verdict(result), setup)["claims"]}
    faster = claims["faster_per_epoch_exact"]
    assert faster["verdict"] == expected and faster["n"] == len(gain)
    np.testing.assert_allclose(faster["effect"], np.mean(gain))
    assert faster["family"] == "faster_per_epoch" and faster["comparison"] == "threshold"
    stable = claims["stable_where_backprop_diverges_exact"]  # one step size: nothing diverged
    assert stable["verdict"] == UNTESTED and "widen lr_grid" in stable["to_remake"]
    assert mismatches(list(claims.values())) == []


def test_each_solver_has_its_own_claims_corrected_together():
    bp, pp = _seeds([0.5] * 6)
    result = Comparison(np.array([0.1]), _curves(bp), {"exact": _curves(pp), "cg3": _curves(pp)},
                        {"BackProp": 1.0, "exact": 1.0, "cg3": 1.0})
    setup = configure(**DEFAULTS | {"seeds": 6, "more_solvers": ["cg3"]})
    claims = {c["name"]: c for c in summary(verdict(result), setup)["claims"]}
    assert list(claims) == ["faster_per_epoch_exact", "stable_where_backprop_diverges_exact",
                            "faster_per_epoch_cg3", "stable_where_backprop_diverges_cg3"]
    exact, cg3 = claims["faster_per_epoch_exact"], claims["faster_per_epoch_cg3"]
    assert exact["family_size"] == cg3["family_size"] == 2
    assert exact["p_raw"] == 1 / 64 and exact["p"] == cg3["p"] == 2 / 64  # Holm over two
    assert exact["verdict"] == cg3["verdict"] == HOLDS


def test_configure_refuses_a_solver_without_declared_claims():
    with pytest.raises(ValueError, match="solver 'cg7' has no declared claims"):
        configure(**DEFAULTS | {"more_solvers": ["cg7"]})


def test_rederive_judges_an_old_record_from_what_it_has():
    old = {"solvers": ["exact"], "lrs": [0.05, 1.0], "by_solver": {"exact": {
        "epochs_proxprop_lower": 4, "epochs": 4, "proxprop_train_loss_epoch4": 0.19,
        "backprop_train_loss_epoch4": 0.43, "proxprop_final_train_loss": 0.19,
        "backprop_final_train_loss": 0.43, "backprop_diverged_lrs": [1.0],
        "proxprop_diverged_lrs": [], "lrs_only_backprop_diverges": [1.0],
        "claim_faster_per_epoch": True, "claim_stable_where_backprop_diverges": True}}}
    claims = {c["name"]: c for c in rederive(old, DEFAULTS | {"seeds": 3, "epochs": 4})["claims"]}
    faster = claims["faster_per_epoch_exact"]
    assert faster["verdict"] == UNTESTED and "re-run -p preset default" in faster["to_remake"]
    # ProxProp diverged on no seed where BackProp did: every seed trained there
    stable = claims["stable_where_backprop_diverges_exact"]
    assert stable["values"] == [1.0, 1.0, 1.0] and stable["verdict"] == INCONCLUSIVE
    assert stable["p"] == 1 / 8


def test_configure_refuses_an_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset 'paper'; choose one of default"):
        configure(**NOTEBOOK_DEFAULTS | {"preset": "paper"})


@pytest.mark.parametrize("kwargs, message", [
    ({"arch": "rnn"}, "unknown arch 'rnn'"), ({"optimizer": "lbfgs"}, "unknown optimizer"),
    ({"tau": 0.0}, "tau must be a positive number"), ({"solver": "cgx"}, "unknown ProxProp"),
    ({"epochs": 0}, "epochs must be at least 1"),
    ({"arch": "conv", "solver": "exact"}, "solver 'exact' handles Linear layers only"),
])
def test_proxprop_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProxPropConfig(**kwargs)


DEFAULTS = dict(preset="default", dataset="digits", arch="mlp", hidden=[8], solver="exact",
                optimizer="nesterov", lr=1.0, backprop_lr=0.05, tau=0.05, epochs=2,
                batch_size=10, seeds=2, lr_grid=[0.1, 1.0])


def test_configure_builds_the_setup_and_its_grid():
    setup = configure(**DEFAULTS)
    assert setup.config.hidden == (8,) and setup.seeds == 2
    np.testing.assert_array_equal(setup.lrs, [0.05, 0.1, 1.0])
    paper = configure(**DEFAULTS | {"preset": "paper_conv"})
    assert paper.config.arch == "conv" and paper.config.solver == "cg3"
    assert paper.dataset == "cifar10"
    fashion = configure(**NOTEBOOK_DEFAULTS | {"preset": "fashion_mlp"})
    assert fashion.solvers == ("exact", "cg3") and fashion.seeds >= 3
    assert fashion.config.hidden == (4000, 1000, 4000) and fashion.config.batch_size == 500
    assert fashion.dataset == "fashion_mnist" and fashion.config.tau == 0.05
    conv = configure(**NOTEBOOK_DEFAULTS | {"preset": "fashion_conv"})
    assert conv.solvers == ("cg3", "cg10") and conv.config.optimizer == "adam"


@pytest.mark.parametrize("change, message", [
    ({"seeds": 0}, "seeds must be at least 1"),
    ({"lr_grid": [-0.1]}, "step sizes must be positive"),
    ({"dataset": "imagenet"}, "unknown dataset 'imagenet'"),
    ({"tau": -1.0}, "tau must be a positive number"),
    ({"preset": "paper"}, "unknown preset 'paper'"),
    ({"more_solvers": ["newton"]}, "unknown ProxProp solver 'newton'"),
    ({"more_solvers": ["exact"]}, "'exact' is BackProp or `solver` itself"),
    ({"more_solvers": ["gradient"]}, "'gradient' is BackProp or `solver` itself"),
    ({"arch": "conv", "solver": "cg3", "more_solvers": ["exact"]},
     "solver 'exact' handles Linear layers only"),
])
def test_configure_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        configure(**DEFAULTS | change)


def test_as_inputs_shapes_images_for_each_arch():
    x = np.zeros((5, 64))
    assert as_inputs(x, "mlp").shape == (5, 64) and as_inputs(x, "conv").shape == (5, 1, 8, 8)
    assert as_inputs(np.zeros((5, 32, 32, 3)), "conv").shape == (5, 3, 32, 32)
    assert as_inputs(np.zeros((5, 28, 28)), "mlp").shape == (5, 784)
    with pytest.raises(ValueError, match="square images"):
        as_inputs(np.zeros((5, 30)), "conv")


def test_compare_trains_backprop_and_each_solver_over_the_same_grid_and_keeps_them(
        tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path))
    setup = configure(**DEFAULTS | {"dataset": "iris", "batch_size": 30, "seeds": 1,
                                    "solver": "cg3", "more_solvers": ["colcg3"],
                                    "lr_grid": [0.1], "epochs": 1, "checkpoint": True})
    x, y = load("iris", "train")
    data = (x, y, x, y)
    grids = experiment.kept(setup, data)
    result = compare(setup, data, grids)
    assert (grids.made, grids.loaded) == (3, 0)

    def never(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(experiment, "timed_grid", never)  # a resumed run reads all three back
    again = compare(setup, data, experiment.kept(setup, data))
    assert again.seconds_per_epoch == result.seconds_per_epoch
    for name in ("cg3", "colcg3"):
        for a, b in zip(again.proxprop[name], result.proxprop[name], strict=True):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(AssertionError, match="trained again"):  # other data: trained anew
        compare(setup, data, experiment.kept(setup, (x[:60], y[:60], x, y)))
    assert list(result.proxprop) == ["cg3", "colcg3"] and result.solver == "cg3"
    assert set(result.seconds_per_epoch) == {"BackProp", "cg3", "colcg3"}
    assert all(s > 0 for s in result.seconds_per_epoch.values())
    key = jax.random.split(jax.random.key(0), 1)[0]  # train_grid's first seed
    alone = make_train(replace(setup.config, solver="colcg3"), *data)(key, setup.lrs[1])
    np.testing.assert_allclose(result.proxprop["colcg3"].train_loss[0, 1], alone.train_loss,
                               rtol=1e-5)
    assert not np.allclose(result.proxprop["colcg3"].train_loss,
                           result.proxprop["cg3"].train_loss)


def test_train_grid_matches_single_runs_and_gradient_solver_is_backprop():
    x, y = load("iris", "train")
    data = (x, y, x, y)
    config = ProxPropConfig(hidden=(8,), epochs=2, batch_size=30, solver="gradient",
                            optimizer="sgd")
    grid = train_grid(config, data, [0.1, 0.5], seeds=2)
    assert grid.train_loss.shape == (2, 2, 3)
    single = make_train(config, *data)(jax.random.split(jax.random.key(0), 2)[1], 0.5)
    np.testing.assert_allclose(grid.train_loss[1, 1], single.train_loss, rtol=1e-5)
    assert float(grid.train_loss[0, 1, -1]) < float(grid.train_loss[0, 1, 0])


def test_make_step_with_sgd_moves_by_minus_lr_times_direction():
    x, y = load("iris", "train")
    x, y = x[:16], y[:16]
    model = mlp([4, 8, 3], key=jax.random.key(0))
    prox = ProxProp(0.5, "exact")
    optimizer = optax.sgd(0.1)
    step = make_step(optimizer, prox)
    stepped, _, aux = step(model, optimizer.init(eqx.filter(model, eqx.is_array)), x, y)
    _, direction = value_and_direction(model, x, y, cross_entropy, prox)
    expected = jax.tree.map(lambda p, d: p - 0.1 * d, eqx.filter(model, eqx.is_array),
                            eqx.filter(direction, eqx.is_array))
    for got, want in zip(jax.tree.leaves(eqx.filter(stepped, eqx.is_array)),
                         jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert 0 <= float(aux.accuracy) <= 1


def test_describe_states_each_verdict_with_its_numbers():
    lrs = np.array([0.1, 1.0])
    backprop = _curves([[[2, 1.0, 0.5], [2, np.nan, np.nan]]])
    proxprop = _curves([[[2, 0.8, 0.6], [2, 0.5, 0.2]]])
    slow = _curves([[[2, 1.5, 0.9], [2, 0.9, 0.8]]])  # ahead after epoch 1, behind after 2
    result = Comparison(lrs, backprop, {"exact": proxprop, "cg3": slow},
                        {"BackProp": 1.0, "exact": 2.0, "cg3": 1.5})
    metrics = verdict(result, early_epoch=1)
    text = " ".join(describe(metrics, configure(**DEFAULTS | {"more_solvers": ["cg3"], "seeds": 1}),
                             early_epoch=1).split())
    # one seed: the shared rule cannot decide (n = 1), and says so with the effect
    one = "on one unit: one unit never decides"
    assert f"ProxProp (exact), faster per epoch: inconclusive (effect +0.533 {one})" in text
    assert f"ProxProp (cg3), faster per epoch: inconclusive (effect -0.133 {one})" in text
    assert f"ProxProp (exact), stable where BackProp diverges: inconclusive (effect +1 {one})" \
        in text
    assert "after epoch 1 0.5 against 1," in text and "losses were [0.2]" in text
    assert "lower than BackProp's after 1 of 2 epochs" in text
    assert "ProxProp (exact, 2.00x)" in text and "ProxProp (cg3, 1.50x)" in text
    assert "weakly" not in text
    assert metrics["by_solver"]["cg3"]["proxprop_final_train_loss"] == 0.8
    assert metrics["proxprop_final_train_loss"] == 0.2 and metrics["solvers"] == ["exact", "cg3"]
    assert metrics["seconds_per_epoch_by_solver"] == {"exact": 2.0, "cg3": 1.5}
    assert metrics["proxprop_seconds_per_epoch"] == 2.0
    # runs compare without the top-level keys that name seconds: none hides deeper down
    untimed = {k: v for k, v in metrics.items() if "seconds" not in k}
    assert "seconds" not in json.dumps(untimed)


def test_side_by_side_is_make_train_one_epoch_at_a_time_and_stops_on_request():
    setup = configure(**DEFAULTS | {"epochs": 3, "batch_size": 30, "dataset": "iris"})
    x, y = load("iris", "train")
    data = (x, y, x, y)
    runs = side_by_side(setup, data, seed=2)
    backprop = replace(setup.config, solver="gradient")
    for name, config, lr in (("BackProp", backprop, setup.backprop_lr),
                             ("ProxProp", setup.config, setup.lr)):
        whole = make_train(config, *data)(jax.random.fold_in(jax.random.key(0), 2), lr)
        model, curves = runs[name]
        for got, want in zip(curves, whole, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5)
        assert np.isclose(cross_entropy(jax.vmap(model)(x), y)[0], curves.train_loss[-1],
                          rtol=1e-5)
    seen = []
    stopped = side_by_side(setup, data, callback=lambda epoch, c: seen.append(epoch) or False)
    assert seen == [1] and stopped["ProxProp"][1].train_loss.shape == (2,)


def test_recorded_curves_are_the_tuned_runs_means():
    lrs = np.array([0.1, 1.0])
    loss = np.array([[[2.0, 1.0], [2.0, 0.5]], [[2.0, 1.2], [2.0, 0.7]]])  # (seeds, lrs, 2)
    c = Curves(loss, loss, 1 - loss / 2)
    result = Comparison(lrs, c, {"exact": c, "cg3": c}, {"BackProp": 1.0, "exact": 1.0, "cg3": 1.0})
    recorded = curves(result)
    tuned = recorded["ProxProp training loss (tuned lr)"]
    assert tuned["x"] == [0, 1] and tuned["y"] == [2.0, 0.6]
    assert (tuned["low"], tuned["high"]) == ([2.0, 0.5], [2.0, 0.7])  # the seeds' min-max
    assert tuned["band"] == "mean of 2 seeds, band min-max"
    assert recorded["ProxProp (cg3) training loss (tuned lr)"] == tuned
    assert json.loads(json.dumps(recorded)) == recorded
