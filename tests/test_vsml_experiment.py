"""The VS-ML reproduction's bookkeeping: configuration, the claims' per-seed numbers
and their verdicts under the shared rule."""

import gzip
import hashlib
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.data import FixedTaskSource, is_cached, load
from lab.data import datasets as ds
from lab.data.download import Remote
from lab.experiments import vsml as experiment
from lab.experiments.vsml import (
    BASELINES,
    accuracy_by_seen,
    choose_step_size,
    configure,
    describe,
    gradient_alignment,
    meta_source,
    pooled,
    rederive,
    seen_before,
    summary,
    sweep_verdict,
    transfer_verdict,
    unseen_source,
    verdict,
    weight_trajectory,
)
from lab.models import VSMLNetwork
from lab.runs.verdict import mismatches
from lab.train import checkpoint

DEFAULTS = dict(method="gradient", iterations=2, tasks_per_batch=2, lr=1e-3, meta_rnn_lr=1e-2,
                meta_rnn_tasks_per_batch=2, population=4, inputs=4, classes=3, hidden=[],
                layer_norm=False, steps=5,
                test_steps=4, test_episodes=2, seeds=1, tasks=["iris", "sum_sign"],
                image_tasks=[], theta="train", checkpoint=False, backprop_alpha=1.0,
                backprop_iterations=2)


def _curves(vsml, meta_rnn, baseline, steps=4):
    by_learner = {"vsml": np.full((2, steps), vsml), "meta_rnn": np.full((2, steps), meta_rnn)}
    return by_learner | {name: np.full(steps, baseline) for name in BASELINES}


def _per_seed(values, steps=4):
    return np.repeat(np.asarray(values, float)[:, None], steps, 1)


def _task(vsml, meta_rnn, baseline):
    """One task's curves: per-seed accuracies of the meta-learners, one baseline level."""
    return ({"vsml": _per_seed(vsml), "meta_rnn": _per_seed(meta_rnn)}
            | {name: np.full(4, baseline) for name in BASELINES})


def _verdicts(m, setup):
    return {c["name"]: c for c in summary(m, setup)["claims"]}


def test_verdict_records_per_seed_numbers_and_summary_judges_each_task():
    six = configure(**DEFAULTS | {"seeds": 6})
    ahead = [0.60, 0.62, 0.58, 0.61, 0.63, 0.59]  # 6 seeds: the sign-flip p can reach 1/64
    level = [0.52, 0.48, 0.53, 0.47, 0.50, 0.50]  # around the baselines' 0.5
    curves = {"iris": _task(ahead, [0.4] * 6, 0.5), "sum_sign": _task(level, [0.45] * 6, 0.5)}
    m = verdict(curves, {"iris": 1 / 3, "sum_sign": 0.5})
    assert m["iris_vsml_accuracy_per_seed"] == pytest.approx(ahead)
    np.testing.assert_allclose(m["mean_vsml_accuracy"], np.mean(ahead + level))
    assert not any(k.startswith("claim_") for k in m)
    v = _verdicts(m, six)
    assert set(v) == {"above_chance_iris", "beats_sgd_and_adam_early_iris", "above_chance_sum_sign",
                      "beats_sgd_and_adam_early_sum_sign", "generalises_better_than_meta_rnn"}
    assert v["above_chance_iris"]["verdict"] == "holds"  # 0.27 above chance on every seed
    np.testing.assert_allclose(v["above_chance_iris"]["effect"], np.mean(ahead) - 1 / 3)
    assert v["above_chance_iris"]["family_size"] == 2  # the tasks are one family (Holm)
    np.testing.assert_allclose(v["above_chance_iris"]["p"], 2 / 64)
    assert v["beats_sgd_and_adam_early_iris"]["verdict"] == "holds"  # +0.105, every seed
    # at chance on sum_sign (0.5): the interval's high end is below the 0.1 that counts
    assert v["above_chance_sum_sign"]["verdict"] == "does not hold"
    # signs flip between seeds around the baselines: the interval is below 0.02, but two
    # seeds reach it, so the test against 0.02 cannot rule it out either
    assert v["beats_sgd_and_adam_early_sum_sign"]["verdict"] == "inconclusive"
    assert v["generalises_better_than_meta_rnn"]["verdict"] == "holds"
    assert mismatches(summary(m, six)["claims"]) == []
    text = " ".join(describe(m, six).split())
    assert "| iris | 0.33 | 0.605 ± 0.017 | 0.400 ± 0.000 | 0.500 |" in text
    assert "| sum_sign | does not hold (effect +0.000 [-0.017, +0.017], p = 0.625, n = 6) |" in text


def test_summary_tells_a_small_effect_and_a_single_seed_apart():
    curves = {"iris": _task(0.5 + np.array([0.01, 0.012, 0.008, 0.011, 0.009, 0.01]),
                            [0.4] * 6, 0.5)}
    v = _verdicts(verdict(curves, {"iris": 1 / 3}), configure(**DEFAULTS | {"seeds": 6}))
    # ahead on every seed, but by 0.01, short of the 0.02 that counts
    assert v["beats_sgd_and_adam_early_iris"]["verdict"] == "smaller than claimed"
    one = {"iris": _task([0.9], [0.1], 0.5)}  # the notebook's smoke run: one seed
    v = _verdicts(verdict(one, {"iris": 1 / 3}), configure(**DEFAULTS))
    assert {c["verdict"] for c in v.values()} == {"inconclusive"}
    assert v["above_chance_iris"]["n"] == 1


@pytest.mark.parametrize("change, message", [
    ({"tasks": ["imagenet"]}, "unknown meta-test task"),
    ({"test_steps": 0}, r"test_steps \(the meta-test episode length\) must"),
    ({"population": 3}, "population must be even"), ({"classes": 11}, "classes must be between"),
    ({"backprop_iterations": 0}, "backprop_iterations must be at least 1"),
    ({"backprop_alpha": -1.0}, "backprop_alpha must be positive"),
])
def test_configure_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        configure(**DEFAULTS | change)


def test_verdict_leaves_the_control_task_out_of_the_claims():
    curves = {"iris": _curves(0.6, 0.5, 0.55), "random_labels": _curves(0.5, 0.5, 0.5)}
    m = verdict(curves, {"iris": 1 / 3, "random_labels": 0.5})
    np.testing.assert_allclose(m["mean_vsml_accuracy"], 0.6)
    assert m["random_labels_vsml_accuracy"] == 0.5
    assert m["iris_vsml_accuracy_per_seed"] == [0.6, 0.6]
    setup = configure(**DEFAULTS | {"tasks": ["iris", "random_labels"], "seeds": 2})
    assert not any("random_labels" in name for name in _verdicts(m, setup))


def test_seen_before_counts_earlier_examples_of_the_same_class():
    ys = np.array([[0, 1, 0, 0, 1, 2]])
    np.testing.assert_array_equal(seen_before(ys), [[0, 0, 1, 2, 1, 0]])
    correct = np.array([[0, 1, 1, 1, 0, 0]])
    np.testing.assert_allclose(accuracy_by_seen(correct, ys, most=3), [1 / 3, 0.5, 1, np.nan])


def test_gradient_alignment_is_one_for_sgd_and_near_zero_shuffled():
    rng = np.random.default_rng(0)
    sgd = rng.normal(size=(3, 50, 4, 2))
    weights = np.concatenate([np.zeros((3, 1, 4, 2)), np.cumsum(sgd, axis=1)], axis=1)[:, :50]
    matched, shuffled = gradient_alignment(weights, sgd)
    np.testing.assert_allclose(matched, 1.0, rtol=1e-6)
    assert abs(shuffled) < 0.1


def test_weight_trajectory_is_the_jacobian_of_the_prediction():
    net = VSMLNetwork((4, 3), key=jax.random.key(0))
    xs = jax.random.normal(jax.random.key(1), (6, 4))
    ys = jnp.array([0, 1, 2, 0, 1, 2])
    weights, sgd, (h, c) = weight_trajectory(net, xs, ys, jax.random.key(2))
    assert weights.shape == sgd.shape == (6, 4, 3) and c.shape == (6, 4, 3, 16)
    state = net.init_state(jax.random.key(2))
    eps = 1e-2
    for t in range(3):
        for a in range(4):
            up = net.step(state, xs[t].at[a].add(eps), ys[t])[1]
            down = net.step(state, xs[t].at[a].add(-eps), ys[t])[1]
            np.testing.assert_allclose(weights[t, a], (up - down) / (2 * eps), atol=2e-3)
        state, logits = net.step(state, xs[t], ys[t])
        error = jax.nn.softmax(logits) - jax.nn.one_hot(ys[t], 3)
        np.testing.assert_allclose(sgd[t], -np.outer(xs[t], error), rtol=1e-5, atol=1e-6)


def test_image_tasks_join_when_cached_and_are_downsampled(data_dir, monkeypatch):
    setup = configure(**DEFAULTS | {"image_tasks": ["mnist"]})
    assert setup.skipped == ("mnist",) and "mnist" not in setup.tasks
    rng = np.random.default_rng(0)
    files = {"train-images-idx3-ubyte.gz": rng.integers(0, 256, (20, 28, 28)),
             "train-labels-idx1-ubyte.gz": np.arange(20) % 10}
    remotes = {}
    for name, array in files.items():
        header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
        header += b"".join(struct.pack(">I", n) for n in array.shape)
        content = gzip.compress(header + array.astype(np.uint8).tobytes())
        (data_dir / "mnist").mkdir(parents=True, exist_ok=True)
        (data_dir / "mnist" / name).write_bytes(content)
        remotes[name] = Remote(name, (), hashlib.sha256(content).hexdigest())
    monkeypatch.setitem(ds.IDX_REMOTES, "mnist", remotes)
    setup = configure(**DEFAULTS | {"image_tasks": ["mnist"]})
    assert setup.tasks == ("iris", "sum_sign", "mnist") and setup.skipped == ()
    source = unseen_source(setup, "mnist")
    # 10 classes, drawn 3 at a time: the Meta-RNN predicts `classes` labels
    assert source.x.shape == (20, 49) and source.n_classes == 10 and source.classes == 3


def test_shipped_theta_must_match_the_meta_training(monkeypatch, tmp_path):
    monkeypatch.setattr(experiment, "SHIPPED", tmp_path)
    with pytest.raises(ValueError, match="no shipped theta for seed 0"):
        configure(**DEFAULTS | {"theta": "shipped"})
    setup = configure(**DEFAULTS)
    trained = experiment.meta_train(setup, "vsml", 0)
    checkpoint.save(experiment.shipped_path(0), (trained.model, trained.losses),
                    meta_training=setup.meta_training(), seed=0, created="now", commit=None)
    shipped = configure(**DEFAULTS | {"theta": "shipped"})
    loaded = experiment.meta_train(shipped, "vsml", 0)
    np.testing.assert_array_equal(loaded.model.cell.w_h, trained.model.cell.w_h)
    np.testing.assert_array_equal(loaded.losses, trained.losses)
    with pytest.raises(ValueError, match=r"meta-trained with \{'lr': 0.001\}; use those values"):
        configure(**DEFAULTS | {"theta": "shipped", "lr": 0.01})


def test_the_shipped_thetas_match_the_notebook_defaults():
    """scripts/vsml_theta.py wrote them with the notebook's defaults; if those change, the
    files must be rewritten (python scripts/vsml_theta.py)."""
    from lab.runs.params import notebook_parameters
    from tests.conftest import ROOT

    defaults = {n: p.default for n, p in notebook_parameters(
        ROOT / "notebooks/02_vsml.ipynb").items()}
    setup = configure(**defaults | {"theta": "shipped", "image_tasks": []})
    for seed in range(setup.seeds):
        assert experiment.load_shipped(setup, seed).losses[-50:].mean() < np.log(3) - 0.2


def test_meta_train_checkpoint_resumes_in_the_experiment(checkpoint_dir):
    setup = configure(**DEFAULTS | {"checkpoint": True})
    first = experiment.meta_train(setup, "meta_rnn", 0)
    assert first.origin == "meta-trained"
    path = experiment.checkpoint_path(setup, "meta_rnn", 0)
    assert path.exists() and path.is_relative_to(checkpoint_dir)
    again = experiment.meta_train(setup, "meta_rnn", 0)
    assert again.origin.startswith("loaded finished checkpoint")
    np.testing.assert_array_equal(again.losses, first.losses)


def test_hidden_vsml_layers_meta_train_and_meta_test_on_other_class_counts():
    setup = configure(**DEFAULTS | {"hidden": [3], "layer_norm": True})
    trained = experiment.meta_train(setup, "vsml", 0)
    assert trained.model.sizes == (4, 3, 3) and trained.model.layer_norm
    source = unseen_source(setup, "breast_cancer")
    net = experiment.for_classes(trained.model, source.classes)
    assert net.sizes == (4, 3, 2)
    np.testing.assert_array_equal(net.cell.w_h, trained.model.cell.w_h)
    accuracy = experiment.online_accuracy(net, source, jax.random.key(0), 2)
    assert accuracy.shape == (4,) and np.all((accuracy >= 0) & (accuracy <= 1))


def test_configure_puts_the_preset_over_the_parameters():
    from lab.runs.params import with_preset

    assert configure(**DEFAULTS | {"preset": "default"}) == configure(**DEFAULTS)
    setup = configure(**DEFAULTS | {"preset": "mnist"})
    assert setup.preset == "mnist" and setup.meta_dataset == "mnist_5k"
    assert setup.tasks == ("mnist_5k", "fashion_mnist") and setup.test_episodes == 64
    assert setup.seeds == DEFAULTS["seeds"]  # what the preset does not name stays
    assert configure(**with_preset(DEFAULTS | {"preset": "mnist"}, experiment.PRESETS)) == setup
    with pytest.raises(ValueError, match=r"^unknown preset 'cifar'; choose one of default, mnist, "
                                         r"mnist_fixed, paper$"):
        configure(**DEFAULTS | {"preset": "cifar"})
    with pytest.raises(ValueError, match="unknown meta-training dataset 'mnist'; choose one of "
                                         "digits, mnist_5k"):
        configure(**DEFAULTS | {"meta_dataset": "mnist"})


def test_an_unknown_preset_is_refused_before_a_kernel_starts():
    from lab.runs.params import ParameterError, resolve
    from tests.conftest import ROOT

    with pytest.raises(ParameterError, match="02_vsml.ipynb: unknown preset 'cifar'; choose one"):
        resolve(ROOT / "notebooks/02_vsml.ipynb", {"preset": "cifar"})
    merged = resolve(ROOT / "notebooks/02_vsml.ipynb", {"preset": "mnist"}).values
    assert configure(**merged).meta_dataset == "mnist_5k"


def test_meta_training_names_its_dataset_only_off_digits():
    digits = configure(**DEFAULTS)
    mnist = configure(**DEFAULTS | {"meta_dataset": "mnist_5k"})
    assert "meta_dataset" not in digits.meta_training()  # digits checkpoints and thetas stay
    assert mnist.meta_training() == digits.meta_training() | {"meta_dataset": "mnist_5k"}
    assert (experiment.checkpoint_path(digits, "vsml", 0)
            != experiment.checkpoint_path(mnist, "vsml", 0))


def test_pooled_averages_four_by_four_blocks():
    x = np.arange(2 * 28 * 28, dtype=np.float32).reshape(2, 28, 28)
    out = pooled(x)
    assert out.shape == (2, 7, 7)
    assert out[0, 0, 0] == 1.5 * 28 + 1.5  # rows 0-3, columns 0-3: mean of 28 r + c
    assert out[1, 6, 6] == 784 + 25.5 * 28 + 25.5
    table = np.ones((3, 5))
    assert pooled(table) is table


def test_mnist_is_meta_trained_on_train_and_meta_tested_on_held_out_digits():
    setup = configure(**DEFAULTS | {"preset": "mnist"})
    train, held_out = meta_source(setup, setup.steps), unseen_source(setup, "mnist_5k")
    assert train.x.shape == (4000, 49) and held_out.x.shape == (1000, 49)  # 80/20 split
    assert train.classes == held_out.classes == 3 and held_out.steps == setup.test_steps
    xs, ys = held_out.sample(jax.random.key(0))
    assert xs.shape == (4, 4) and set(np.asarray(ys)) <= {0, 1, 2}


def _transfer_curves(vsml_fashion, rnn_fashion):
    """Held-out MNIST: VS-ML 0.8, Meta-RNN 0.85 (two seeds each), baselines 0.82."""
    seen = {"vsml": np.full((2, 4), 0.8), "meta_rnn": np.full((2, 4), 0.85)}
    fashion = {"vsml": np.repeat(np.array(vsml_fashion)[:, None], 4, 1),
               "meta_rnn": np.repeat(np.array(rnn_fashion)[:, None], 4, 1)}
    return {"mnist_5k": seen | {b: np.full(4, 0.82) for b in BASELINES},
            "fashion_mnist": fashion | {b: np.full(4, 0.7) for b in BASELINES}}


def test_transfer_claims_are_judged_per_seed_as_one_family():
    chances = {"mnist_5k": 0.1, "fashion_mnist": 0.1}
    six = configure(**DEFAULTS | {"preset": "mnist_fixed", "seeds": 6})
    vsml = [0.58, 0.59, 0.57, 0.6, 0.56, 0.58]
    rnn = [0.09, 0.08, 0.1, 0.11, 0.07, 0.09]  # at chance on the unseen dataset
    curves = {"mnist_5k": _task([0.7] * 6, [0.94] * 6, 0.6),
              "fashion_mnist": _task(vsml, rnn, 0.55)}
    m = verdict(curves, chances, seen=("mnist_5k",)) | transfer_verdict(curves, chances,
                                                                         "mnist_5k")
    assert m["transfer_unseen"] == ["fashion_mnist"]
    assert m["seeds_vsml_transfers_to_fashion_mnist"] == 6
    assert m["seeds_meta_rnn_worse_on_fashion_mnist"] == 6
    np.testing.assert_allclose([m["drop_fashion_mnist_vsml"], m["drop_fashion_mnist_meta_rnn"],
                                m["drop_fashion_mnist_best_baseline"]],
                               [0.7 - np.mean(vsml), 0.94 - np.mean(rnn), 0.05])
    v = _verdicts(m, six)
    transfer = [v[n] for n in ("vsml_transfers", "meta_rnn_worse_on_unseen",
                               "meta_rnn_worse_than_vsml_on_unseen")]
    assert [c["verdict"] for c in transfer] == ["holds"] * 3
    assert [c["family_size"] for c in transfer] == [3] * 3  # Holm: 3 x 1/64 <= 0.05
    np.testing.assert_allclose(v["meta_rnn_worse_on_unseen"]["effect"], 0.94 - np.mean(rnn))
    # the 2026-11-23 `mnist` run: the Meta-RNN higher on the unseen dataset on every seed
    curves["fashion_mnist"] = _task(vsml, [0.98, 0.97, 0.99, 0.98, 0.96, 0.97], 0.55)
    m = verdict(curves, chances, seen=("mnist_5k",)) | transfer_verdict(curves, chances,
                                                                         "mnist_5k")
    v = _verdicts(m, six)
    assert v["meta_rnn_worse_on_unseen"]["verdict"] == "does not hold"
    assert v["meta_rnn_worse_than_vsml_on_unseen"]["verdict"] == "does not hold"
    # without held-out examples of the meta-training dataset there is nothing to judge
    assert transfer_verdict(_transfer_curves([0.7, 0.7], [0.3, 0.3]), chances, "digits") == {}


def test_rederive_judges_a_recorded_run_as_summary_does():
    chances = {"mnist_5k": 1 / 3, "fashion_mnist": 1 / 3}
    curves = _transfer_curves([0.85, 0.6], [0.3, 0.5])
    m = verdict(curves, chances, seen=("mnist_5k",)) | transfer_verdict(curves, chances,
                                                                         "mnist_5k")
    parameters = DEFAULTS | {"preset": "mnist", "seeds": 2}
    again = rederive(dict(m), parameters)
    assert again == summary(m, configure(**parameters))
    assert [c["name"] for c in again["claims"]] == [
        "above_chance_fashion_mnist", "beats_sgd_and_adam_early_fashion_mnist",
        "generalises_better_than_meta_rnn", "vsml_transfers", "meta_rnn_worse_on_unseen",
        "meta_rnn_worse_than_vsml_on_unseen"]
    assert mismatches(again["claims"]) == []
    assert set(c["name"] for c in again["claims"]) <= set(experiment.CLAIMS)


def test_verdict_leaves_the_meta_training_dataset_out_of_the_unseen_claims():
    curves = _transfer_curves([0.7, 0.7], [0.3, 0.3])
    chances = {"mnist_5k": 1 / 3, "fashion_mnist": 1 / 3}
    setup = configure(**DEFAULTS | {"preset": "mnist", "seeds": 2})
    v = verdict(curves, chances, seen=("mnist_5k",))
    v |= transfer_verdict(curves, chances, "mnist_5k")
    np.testing.assert_allclose(v["mean_meta_rnn_accuracy"], 0.3)  # not held-out mnist_5k
    assert not any("mnist_5k" in name for name in _verdicts(v, setup))
    text = " ".join(describe(v, setup).split())
    assert "| mnist_5k (held-out test split) | 0.33 | 0.800 ± 0.000 |" in text
    assert ("- **fashion_mnist**: VS-ML 0.700 (seeds 0.700, 0.700; 2 of 2 at least chance + 0.1), "
            "Meta-RNN 0.300 (seeds 0.300, 0.300; 2 of 2 below its held-out mnist_5k). Drop from "
            "held-out mnist_5k (negative: higher on fashion_mnist): VS-ML +0.100, Meta-RNN "
            "+0.550, best tuned SGD/Adam +0.120.") in text
    # two seeds: the sign-flip p cannot go below 1/4, so the claim stays open
    assert ("(c) It does worse than VS-ML there (by at least 0.02): inconclusive (effect "
            "+0.400 [+0.400, +0.400], p = 0.75, n = 2)") in text


def test_mnist_fixed_meta_trains_on_mnists_own_pixels_and_labels():
    setup = configure(**DEFAULTS | {"preset": "mnist_fixed"})
    assert setup.fixed_tasks and (setup.inputs, setup.classes) == (49, 10)
    assert setup.meta_rnn_sweep == (3e-3, 1e-2, 3e-2)
    train, validation = meta_source(setup, setup.steps), experiment.validation_source(setup)
    x, y = load("mnist_5k", "train")
    held = experiment.validation_mask(y)  # the last 40 of each digit's 400
    assert held.sum() == 400 and np.all(np.bincount(y[held]) == 40)
    mean, std = experiment.fixed_statistics(setup)
    assert isinstance(train, FixedTaskSource) and train.x.shape == (3600, 49)
    np.testing.assert_allclose(train.x, ((pooled(x[~held]) - mean) / std).reshape(3600, 49),
                               atol=1e-5)
    np.testing.assert_array_equal(train.y, y[~held])  # the digit is the label, in every episode
    np.testing.assert_array_equal(validation.y, y[held])
    assert validation.steps == setup.steps and validation.x.shape == (400, 49)
    xs, ys = train.sample(jax.random.key(0))
    assert xs.shape == (setup.steps, 49) and set(np.asarray(ys)) == set(range(10))
    held_out = unseen_source(setup, "mnist_5k")
    assert held_out.x.shape == (1000, 49) and held_out.steps == setup.test_steps
    # at 784 pixels the statistics are close to the authors' MNIST constants (0.1307, 0.3081)
    full = configure(**DEFAULTS | experiment.PRESETS["mnist_fixed"] | {"inputs": 784})
    np.testing.assert_allclose(experiment.fixed_statistics(full), (0.1307, 0.3081), atol=3e-3)
    if is_cached("fashion_mnist"):  # the unseen dataset: its test split, same pixels and scale
        fashion = unseen_source(setup, "fashion_mnist")
        assert fashion.x.shape == (10000, 49) and fashion.classes == 10
        xf, _ = load("fashion_mnist", "test")
        np.testing.assert_allclose(fashion.x[0], (pooled(xf[:1])[0].ravel() - mean) / std,
                                   atol=1e-5)


def test_fixed_tasks_are_refused_where_pixels_or_labels_differ():
    fixed = DEFAULTS | experiment.PRESETS["mnist_fixed"]  # its values, each changed below
    with pytest.raises(ValueError, match="fixed_tasks needs datasets with the same pixels and ten "
                                         "labels .*; not iris"):
        configure(**fixed | {"tasks": ["mnist_5k", "iris"]})
    with pytest.raises(ValueError, match="not digits"):
        configure(**fixed | {"meta_dataset": "digits"})
    with pytest.raises(ValueError, match="one of 784, 196, 49, 16, got 50"):
        configure(**fixed | {"inputs": 50})
    with pytest.raises(ValueError, match="classes must be 10, got 3"):
        configure(**fixed | {"classes": 3})
    with pytest.raises(ValueError, match="got 100 and 1001"):
        configure(**fixed | {"test_steps": 1001})
    with pytest.raises(ValueError, match="meta_rnn_lrs must be distinct positive"):
        configure(**fixed | {"meta_rnn_lrs": [1e-2, 1e-2]})
    projected = configure(**DEFAULTS | {"preset": "mnist"})
    fixed_setup = configure(**fixed)
    assert "fixed_tasks" not in projected.meta_training()  # older checkpoints keep their names
    assert fixed_setup.meta_training()["fixed_tasks"]


def test_choose_step_size_takes_the_lowest_validation_loss():
    validation = {3e-3: [1.2, 1.0],  # mean 1.1
                  1e-2: [0.9, 1.2],  # 1.05
                  3e-2: [0.2, np.nan]}  # one seed diverged: infinite
    assert choose_step_size(validation) == 1e-2
    assert choose_step_size({3e-3: [1.0], 1e-2: [1.0]}) == 3e-3  # a tie: the first listed
    assert choose_step_size({1e-2: [np.nan]}) == 1e-2  # nothing swept: the one given
    with pytest.raises(ValueError, match="no step sizes"):
        choose_step_size({})
    # the final meta-training loss, reported beside it: the last 50 iterations, then the seeds
    runs = [np.concatenate([np.full(50, 0.1), np.full(50, 1.0)]), np.full(100, 1.2)]
    np.testing.assert_allclose(experiment.final_loss(runs), 1.1)
    assert experiment.final_loss([np.full(60, np.nan)]) == float("inf")


def test_sweep_verdict_records_every_step_size_and_describe_judges_each():
    curves = _transfer_curves([0.7, 0.7], [0.3, 0.3])
    chances = {"mnist_5k": 0.1, "fashion_mnist": 0.1}
    sweep = {1e-2: {t: curves[t]["meta_rnn"] for t in curves},  # 0.85 held out, 0.3 unseen
             3e-2: {"mnist_5k": np.full((2, 4), 0.5), "fashion_mnist": np.full((2, 4), 0.75)}}
    losses = {1e-2: [np.full(60, 0.1)], 3e-2: [np.full(60, 0.4)]}
    validation = {1e-2: [0.9, 0.9], 3e-2: [0.5, 0.6]}
    v = sweep_verdict(sweep, losses, validation)
    assert v["meta_rnn_lr_chosen"] == 3e-2  # by validation, not by the lower meta-training loss
    large = v["meta_rnn_sweep"]["0.03"]
    assert not any(k.startswith("claim_") for k in large)
    assert large["fashion_mnist_accuracy_per_seed"] == [0.75, 0.75]
    np.testing.assert_allclose([large["meta_loss_end"], large["validation_loss"]], [0.4, 0.55])
    assert sweep_verdict({1e-2: sweep[1e-2]}, losses, validation) == {}
    setup = configure(**DEFAULTS | {"preset": "mnist_fixed", "seeds": 2})
    m = verdict(curves, chances, seen=("mnist_5k",)) | transfer_verdict(curves, chances,
                                                                         "mnist_5k")
    text = " ".join(describe(m | v, setup).split())
    # 0.75 on unseen against 0.5 held out, and above VS-ML's 0.7: the wrong way on both
    # seeds, but two seeds cannot rule the claim out (the test the other way: p >= 1/4)
    assert ("| 0.03 (chosen) | 0.400 | 0.550 | 0.500 | 0.750 | inconclusive (effect -0.250 "
            in text)
    assert "| 0.01 | 0.100 | 0.900 | 0.850 | 0.300 | inconclusive (effect +0.550 " in text
