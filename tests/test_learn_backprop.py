"""Learning backprop: the teacher against jax.grad, SGD against a numpy loop, the pair
runner against the network's own timing, and a short training run."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.experiments import vsml_backprop as experiment
from lab.models import VSMLCell, VSMLNetwork
from lab.models.vsml import init_layer_state
from lab.train.learn_backprop import (
    BackpropConfig,
    make_learn_backprop,
    pair_outputs,
    seen_errors,
    sgd_reference,
    teacher,
)


def test_teacher_update_is_scaled_cross_entropy_gradient():
    """Per pair, w_1 - w_0 = -alpha x_a e_b = -alpha A dCE/dW_ab for z = x W / A."""
    A, B, alpha = 5, 3, 0.7
    k_x, k_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(k_x, (A,))
    w = jax.random.normal(k_w, (A, B)) / np.sqrt(A)
    y = 2

    def cross_entropy(w):
        return -jax.nn.log_softmax(x @ w / A)[y]

    error = jax.nn.softmax(x @ w / A) - jax.nn.one_hot(y, B)
    # pair (a, b) flattened to p = a * B + b; the second step's x and e do not matter
    xs = jnp.stack([jnp.repeat(x, B), jnp.ones(A * B)])
    es = jnp.stack([jnp.tile(error, A), jnp.ones(A * B)])
    targets = teacher(xs, es, w.reshape(-1), alpha)
    update = (targets.w[1] - targets.w[0]).reshape(A, B)
    np.testing.assert_allclose(update, -alpha * A * jax.grad(cross_entropy)(w), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(targets.w[0], w.reshape(-1))  # e_{-1} = 0: no update at t = 0
    np.testing.assert_allclose(targets.fwd, xs * targets.w)
    np.testing.assert_allclose(targets.bwd[1], es[0] * targets.w[1])
    np.testing.assert_array_equal(targets.bwd[0], 0)


def test_sgd_reference_matches_numpy_loop():
    rng = np.random.default_rng(0)
    T, A, B, alpha = 6, 4, 3, 0.9
    xs = rng.standard_normal((T, A)).astype(np.float32)
    ys = rng.integers(0, B, T)
    w = rng.standard_normal((A, B)).astype(np.float32) / 2
    logits = sgd_reference(jnp.asarray(xs), jnp.asarray(ys), jnp.asarray(w), alpha)
    expected = []
    for x, y in zip(xs.astype(np.float64), ys, strict=True):
        z = x @ w / A
        expected.append(z)
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        w = w - alpha * np.outer(x, p - np.eye(B)[y])
    np.testing.assert_allclose(logits, np.array(expected), rtol=1e-5, atol=1e-6)


def test_sgd_reference_starts_from_the_networks_weights():
    """The reference's W_0 is c[..., 0] of the state the network draws from the same key."""
    A, B, key = 4, 3, jax.random.key(4)
    net = VSMLNetwork((A, B), key=jax.random.key(5))
    w0 = experiment.initial_weights(net, key)
    _, c = init_layer_state(jax.random.split(key, 1)[0], A, B, 16)  # as init_state splits
    np.testing.assert_array_equal(w0, c[..., 0])
    assert w0.shape == (A, B) and np.any(w0 != 0)
    xs = jax.random.normal(jax.random.key(6), (7, A))
    logits = experiment.reference_logits(net, xs, jnp.zeros(7, int), key, alpha=1.0)
    np.testing.assert_allclose(logits[0], xs[0] @ c[..., 0] / A, rtol=1e-5)


def test_pair_outputs_average_to_the_network_logits():
    """Each pair run alone, fed the network's own errors one step late, reproduces the
    network: mean over inputs of the pairs' forward channel 1 is the prediction."""
    A, B, T = 4, 3, 7
    net = VSMLNetwork((A, B), key=jax.random.key(5))
    net = eqx.tree_at(lambda n: n.cell.w_bwd, net, net.cell.w_bwd * 5)  # errors matter
    xs = jax.random.normal(jax.random.key(6), (T, A))
    ys = jax.random.randint(jax.random.key(7), (T,), 0, B)
    key = jax.random.key(8)
    logits = net(xs, ys, key)
    errors = jax.nn.softmax(logits) - jax.nn.one_hot(ys, B)  # (T, B), e_t of step t
    h, c = net.init_state(key).layers[0]  # (A, B, s)
    outputs = pair_outputs(net.cell, jnp.repeat(xs, B, axis=1), jnp.tile(errors, (1, A)),
                           (h.reshape(A * B, -1), c.reshape(A * B, -1)), net.ticks)
    fwd = outputs.fwd.reshape(T, A, B).mean(1)
    np.testing.assert_allclose(100 * np.tanh(fwd / 100), logits, rtol=1e-4, atol=1e-5)
    assert outputs.w.shape == (T, A * B)


def test_seen_errors_shifts_by_one_step():
    np.testing.assert_array_equal(seen_errors(jnp.array([1.0, 2.0, 3.0])), [0.0, 1.0, 2.0])


def test_learn_backprop_lowers_the_imitation_loss():
    config = BackpropConfig(iterations=60, pairs=32, steps=4, lr=0.1)
    _, errors = make_learn_backprop(config)(VSMLCell(key=jax.random.key(0)), jax.random.key(1))
    assert all(e.shape == (60,) and np.all(np.isfinite(e)) for e in errors)
    total = np.asarray(sum(errors))  # each iteration on fresh streams
    assert total[-10:].mean() < 0.95 * total[:10].mean()


@pytest.mark.parametrize("field, value, message", [
    ("alpha", 0.0, "alpha must be positive"),
    ("iterations", 0, "iterations must be at least 1"),
    ("pairs", 0, "pairs must be at least 1"),
    ("classes", 1, "classes must be at least 2"),
    ("lr_end", 1.5, "lr_end is a fraction"),
    ("logit_scale", -1.0, "logit_scale must be non-negative"),
])
def test_backprop_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        dataclasses.replace(BackpropConfig(), **{field: value})
    assert "\n" not in str(error.value)


def test_configure_rejects_unknown_task():
    with pytest.raises(ValueError, match="unknown task"):
        experiment.configure(alpha=1.0, iterations=1, pairs=1, steps=1, lr=1e-3, inputs=4,
                             classes=3, test_steps=5, test_episodes=2, tasks=["nope"])


def test_compare_runs_every_learner_on_every_task():
    setup = experiment.configure(alpha=1.0, iterations=1, pairs=2, steps=2, lr=1e-3, inputs=4,
                                 classes=3, test_steps=5, test_episodes=2, tasks=["iris"])
    curves = experiment.compare(setup, {"vsml": VSMLCell(key=jax.random.key(0))},
                                jax.random.key(1))
    assert set(curves["iris"]) == {"vsml", "sgd"}
    assert all(c.shape == (5,) and np.all((c >= 0) & (c <= 1)) for c in curves["iris"].values())
    metrics = experiment.summarise(curves, {"fwd": 0.1, "bwd": 0.2, "w": 0.3}, setup)
    assert metrics["iris_gap"] == pytest.approx(metrics["iris_vsml_accuracy"]
                                                - metrics["iris_sgd_accuracy"])
    assert metrics["iris_chance"] == pytest.approx(1 / 3)
