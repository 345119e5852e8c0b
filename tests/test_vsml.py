"""The VS-ML cell and network against direct, pair-by-pair computations."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.data import FixedTaskSource, TaskSource, load
from lab.data.tasks import fixed_projections
from lab.models import VSMLCell, VSMLNetwork, online_loss
from lab.models.vsml import init_layer_state
from lab.train.vsml import METHODS, MetaConfig, es_gradient, make_meta_train


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def test_vsml_cell_has_the_reference_size():
    cell = VSMLCell(key=jax.random.key(0))
    n = sum(leaf.size for leaf in jax.tree.leaves(eqx.filter(cell, eqx.is_array)))
    assert n == (8 + 8 + 16) * 64 + 64 + 2 * (16 * 8 + 8) == 2384


def test_vsml_tick_matches_pairwise_lstm():
    keys = jax.random.split(jax.random.key(1), 5)
    cell = VSMLCell(4, 3, key=keys[0])
    cell = eqx.tree_at(lambda c: c.bias, cell, jax.random.normal(keys[4], (16,)))
    A, B = 3, 2
    fwd = np.asarray(jax.random.normal(keys[1], (A, 3)))
    bwd = np.asarray(jax.random.normal(keys[2], (B, 3)))
    h = np.asarray(jax.random.normal(keys[3], (A, B, 4)))
    c = np.asarray(jax.random.normal(keys[0], (A, B, 4)))
    W = np.vstack([cell.w_fwd, cell.w_bwd, cell.w_h])  # the unsplit gate matrix
    fwd_out, bwd_out, (h_new, c_new) = cell.tick(jnp.asarray(fwd), jnp.asarray(bwd), (h, c))
    fwd_pairs = np.zeros((A, B, 3))
    bwd_pairs = np.zeros((A, B, 3))
    for a in range(A):
        for b in range(B):
            gates = np.concatenate([fwd[a], bwd[b], h[a, b]]) @ W + np.asarray(cell.bias)
            i, g, f, o = np.split(gates, 4)
            c_ab = _sigmoid(f + 5) * c[a, b] + _sigmoid(i - 5) * np.tanh(g)
            h_ab = _sigmoid(o) * np.tanh(c_ab)
            np.testing.assert_allclose(c_new[a, b], c_ab, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(h_new[a, b], h_ab, rtol=1e-5, atol=1e-6)
            fwd_pairs[a, b] = np.asarray(cell.out_fwd(jnp.asarray(h_ab)))
            bwd_pairs[a, b] = np.asarray(cell.out_bwd(jnp.asarray(h_ab)))
    np.testing.assert_allclose(fwd_out, fwd_pairs.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bwd_out, bwd_pairs.mean(1), rtol=1e-5, atol=1e-6)


def test_vsml_initial_state_halves_c():
    h, c = init_layer_state(jax.random.key(0), 400, 50, 16)
    assert not np.any(h) and not np.any(c[..., 8:])
    np.testing.assert_allclose(np.std(c[..., :8]), 1 / np.sqrt(400), rtol=0.02)


def _episode(T=12, n_in=5, classes=3, seed=0):
    keys = jax.random.split(jax.random.key(seed), 2)
    xs = jax.random.normal(keys[0], (T, n_in))
    ys = jax.random.randint(keys[1], (T,), 0, classes)
    return xs, ys


@pytest.mark.parametrize("sizes", [(5, 3), (5, 4, 3)])
def test_vsml_prediction_precedes_its_label(sizes):
    """Changing y_t leaves logits up to t unchanged and changes logits after t."""
    net = VSMLNetwork(sizes, feed_label=True, key=jax.random.key(2))
    net = eqx.tree_at(lambda n: n.cell.w_bwd, net, net.cell.w_bwd * 20)  # strong feedback
    xs, ys = _episode()
    run = eqx.filter_jit(lambda ys: net(xs, ys, jax.random.key(3)))
    base = run(ys)
    t = 5
    changed = run(ys.at[t].set((ys[t] + 1) % 3))
    np.testing.assert_array_equal(base[: t + 1], changed[: t + 1])
    # the error enters the last layer's backward message at the next step
    assert not np.allclose(base[t + 1], changed[t + 1])


def test_vsml_meta_gradient_flows_to_every_cell_parameter():
    net = VSMLNetwork((5, 4, 3), key=jax.random.key(4))
    xs, ys = _episode()
    grads = eqx.filter_grad(lambda n: online_loss(n(xs, ys, jax.random.key(5)), ys)[0])(net)
    for leaf in jax.tree.leaves(eqx.filter(grads, eqx.is_array)):
        assert np.all(np.isfinite(leaf)) and np.any(leaf != 0)


def test_online_loss_is_the_mean_prequential_cross_entropy():
    logits = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    loss, correct = online_loss(logits, jnp.array([1, 0]))
    np.testing.assert_allclose(loss, (np.log(2) + np.log(4 / 3)) / 2, rtol=1e-6)
    np.testing.assert_array_equal(correct, [False, True])


def test_vsml_rejects_bad_input():
    net = VSMLNetwork((5, 3), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"expects \(steps, 5\); project the task's inputs"):
        net(jnp.zeros((4, 7)), jnp.zeros(4, int), jax.random.key(1))
    with pytest.raises(ValueError, match="the episode has 0 steps"):
        net(jnp.zeros((0, 5)), jnp.zeros(0, int), jax.random.key(1))
    with pytest.raises(ValueError, match="at least an input and an output size"):
        VSMLNetwork((5,), key=jax.random.key(0))


def test_es_gradient_is_exact_on_a_quadratic_given_its_noise():
    """For L = 1/2 |theta - a|^2, L(theta + s e) - L(theta - s e) = 2 s e.(theta - a), so
    the antithetic estimate equals mean(e e^T) (theta - a) over the drawn directions."""
    theta = {"w": jnp.array([1.0, -2.0, 0.5])}
    a = jnp.array([0.3, 0.1, -1.0])
    grad, _ = es_gradient(lambda p: 0.5 * jnp.sum((p["w"] - a) ** 2), theta,
                          jax.random.key(0), population=8, sigma=0.05)
    eps = jax.random.normal(jax.random.key(0), (4, 3))
    expected = (eps.T @ eps / 8) @ (theta["w"] - a) * 2
    np.testing.assert_allclose(grad["w"], expected, rtol=1e-4)


def test_es_gradient_approaches_the_true_gradient_with_population():
    a = jnp.arange(4.0)
    grad, _ = es_gradient(lambda w: 0.5 * jnp.sum((w - a) ** 2), jnp.zeros(4),
                          jax.random.key(1), population=20000, sigma=0.05)
    np.testing.assert_allclose(grad, -a, atol=0.1)


@pytest.mark.parametrize("kwargs, message", [
    ({"population": 7}, "population must be even"), ({"method": "adam"}, "unknown meta"),
    ({"iterations": 0}, "iterations must be at least 1"),
])
def test_meta_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MetaConfig(**kwargs)


def test_task_source_relabels_a_class_subset_and_checks_sizes():
    x = np.repeat(np.arange(5.0)[:, None], 4, axis=0).reshape(20, 1) * np.ones((1, 3))
    y = np.repeat(np.arange(5), 4)
    source = TaskSource(x, y, inputs=2, classes=3, steps=30)
    xs, ys = source.sample(jax.random.key(0))
    assert xs.shape == (30, 2) and set(np.unique(ys)) <= {0, 1, 2}
    with pytest.raises(ValueError, match="episode length must be at least 1"):
        TaskSource(x, y, inputs=2, classes=3, steps=0)
    with pytest.raises(ValueError, match="a task needs 2 to 5 classes"):
        TaskSource(x, y, inputs=2, classes=6, steps=3)


def test_fixed_task_source_keeps_every_pixel_and_label():
    """The authors' default task: the examples themselves, standardised with one mean and
    std, their own labels; distinct examples within an episode."""
    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2)  # 6 images of 2x2 "pixels"
    y = np.array([3, 0, 1, 2, 3, 1])
    source = FixedTaskSource(x, y, steps=6, mean=2.0, std=4.0)
    assert (source.inputs, source.classes, source.steps) == (4, 4, 6)
    xs, ys = source.sample(jax.random.key(0))
    rows = (np.asarray(xs) * 4.0 + 2.0).round().astype(int)  # back to the raw pixels
    index = rows[:, 0] // 4  # image i holds 4i .. 4i + 3
    np.testing.assert_array_equal(rows, np.arange(24).reshape(6, 4)[index])
    np.testing.assert_array_equal(ys, y[index])  # each image keeps its own label
    assert sorted(index) == list(range(6))  # without replacement: every image once
    other = np.asarray(source.sample(jax.random.key(1))[0])
    assert not np.array_equal(other, np.asarray(xs))  # another order, the same images
    assert FixedTaskSource(x, y, steps=2, mean=0.0, std=1.0, classes=10).classes == 10
    with pytest.raises(ValueError, match="episode length must be 1 to 6"):
        FixedTaskSource(x, y, steps=7, mean=0.0, std=1.0)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        FixedTaskSource(x, y, steps=2, mean=0.0, std=1.0, classes=3)


def test_fixed_tasks_with_rand_proj_send_half_the_episodes_through_a_fixed_projection():
    """The authors' rand_proj mix: an episode is either the raw pixels or the same pixels
    times one of k fixed Glorot-uniform matrices (labels unchanged); about half are
    projected; without projections the draws are those of the plain source."""
    x = np.random.default_rng(0).normal(size=(40, 3, 3)).astype(np.float32)
    y = np.arange(40) % 10
    plain = FixedTaskSource(x, y, steps=40, mean=0.0, std=1.0)
    mixed = FixedTaskSource(x, y, steps=40, mean=0.0, std=1.0, projections=2)
    p = np.asarray(mixed.projections)
    assert p.shape == (2, 9, 9) and np.abs(p).max() <= np.sqrt(6 / 18)
    np.testing.assert_array_equal(p, fixed_projections(2, 9))  # drawn once, generator 0
    flat = x.reshape(40, 9)

    def rows_of(xs):  # the index of each episode row among the images, or None
        found = [np.flatnonzero(np.abs(flat - r).max(1) < 1e-3) for r in xs]
        return [int(f[0]) for f in found] if all(len(f) == 1 for f in found) else None

    kinds = []
    for k in range(64):
        xs, ys = (np.asarray(a) for a in mixed.sample(jax.random.key(k)))
        undone = [xs, *(xs @ np.linalg.inv(m) for m in p)]  # raw, or through matrix 0, 1
        matches = [rows_of(u) for u in undone]
        (kind,) = [i for i, m in enumerate(matches) if m is not None]
        np.testing.assert_array_equal(ys, y[matches[kind]])  # each image keeps its label
        kinds.append(kind)
    assert 20 <= kinds.count(0) <= 44 and {1, 2} <= set(kinds)  # about half, both matrices
    np.testing.assert_array_equal(plain.sample(jax.random.key(3))[0],
                                  FixedTaskSource(x, y, steps=40, mean=0.0, std=1.0
                                                  ).sample(jax.random.key(3))[0])
    with pytest.raises(ValueError, match="projections must be 0"):
        FixedTaskSource(x, y, steps=4, mean=0.0, std=1.0, projections=-1)


def test_layer_norm_normalises_only_messages_between_layers():
    """With one layer there is nothing between layers: layer_norm changes nothing. With two,
    it changes the outputs and the normalised message has zero mean and unit variance."""
    xs, ys = _episode()
    key = jax.random.key(3)
    single = VSMLNetwork((5, 3), key=jax.random.key(2))
    single_ln = VSMLNetwork((5, 3), layer_norm=True, key=jax.random.key(2))
    np.testing.assert_array_equal(single(xs, ys, key), single_ln(xs, ys, key))
    deep = VSMLNetwork((5, 4, 3), key=jax.random.key(2))
    deep_ln = VSMLNetwork((5, 4, 3), layer_norm=True, key=jax.random.key(2))
    assert not np.allclose(deep(xs, ys, key), deep_ln(xs, ys, key))
    from lab.models.vsml import _normalise
    m = _normalise(jax.random.normal(key, (4, 8)) * 3 + 1)
    np.testing.assert_allclose(m.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(m.var(-1), 1, atol=1e-3)


def _checkpoint_setup():
    x, y = load("iris")
    source = TaskSource(x, y, inputs=4, classes=2, steps=8)
    return source, VSMLNetwork((4, 2), key=jax.random.key(0))


@pytest.mark.parametrize("method", METHODS)
def test_meta_train_resumes_after_an_interruption_exactly(tmp_path, monkeypatch, method):
    """Chunks of 2 iterations; Ctrl-C after the first checkpoint; a second call resumes
    from iteration 2 and ends where an uninterrupted single scan ends."""
    from lab.train import checkpoint

    source, net = _checkpoint_setup()
    meta_train = make_meta_train(MetaConfig(method=method, iterations=6, tasks=2,
                                            population=4), source)
    whole, (losses, _) = meta_train(net, jax.random.key(1))
    assert losses.shape == (6,) and np.all(np.isfinite(losses))
    assert not np.allclose(whole.cell.w_h, net.cell.w_h)
    path = tmp_path / "theta.eqx"
    save = checkpoint.save

    def save_then_interrupt(*args, **info):
        save(*args, **info)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        meta_train(net, jax.random.key(1), checkpoint=path, every=2)
    monkeypatch.setattr(checkpoint, "save", save)
    assert checkpoint.read_info(path)["done"] == 2
    resumed, (resumed_losses, _) = meta_train(net, jax.random.key(1), checkpoint=path, every=2)
    assert checkpoint.read_info(path)["done"] == 6
    np.testing.assert_allclose(resumed_losses, losses, rtol=1e-5)
    np.testing.assert_allclose(resumed.cell.w_h, whole.cell.w_h, rtol=1e-5, atol=1e-7)
    # a finished checkpoint is returned as it is
    again, (again_losses, _) = meta_train(net, jax.random.key(1), checkpoint=path)
    np.testing.assert_array_equal(again.cell.w_h, resumed.cell.w_h)
    np.testing.assert_array_equal(again_losses, resumed_losses)


def test_meta_train_refuses_a_checkpoint_of_another_run(tmp_path):
    source, net = _checkpoint_setup()
    path = tmp_path / "theta.eqx"
    make_meta_train(MetaConfig(iterations=2, tasks=2), source)(net, jax.random.key(1),
                                                               checkpoint=path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="written with a different config; delete it"):
        make_meta_train(MetaConfig(iterations=2, tasks=2, lr=0.01), source)(
            net, jax.random.key(1), checkpoint=path)
    with pytest.raises(ValueError, match="different key"):
        make_meta_train(MetaConfig(iterations=2, tasks=2), source)(
            net, jax.random.key(2), checkpoint=path)
    assert path.read_bytes() == before
