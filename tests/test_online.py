"""Online baselines and the Meta-RNN: predict before the label, update in closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models import MetaRNN, mlp
from lab.train.online import make_online_learner


def test_online_sgd_linear_step_matches_closed_form():
    xs = jnp.array([[1.0, 2.0], [0.5, -1.0]])
    ys = jnp.array([1, 0])
    key = jax.random.key(0)
    logits = make_online_learner(2, 3, 0, "sgd")(xs, ys, key, 0.1)
    layer = mlp([2, 3], key=key).layers[1]
    W, b = np.asarray(layer.weight), np.asarray(layer.bias)
    z0 = W @ np.asarray(xs[0]) + b
    np.testing.assert_allclose(logits[0], z0, rtol=1e-6)
    error = np.exp(z0) / np.exp(z0).sum() - np.eye(3)[1]  # dCE/dz
    W1, b1 = W - 0.1 * np.outer(error, xs[0]), b - 0.1 * error
    np.testing.assert_allclose(logits[1], W1 @ np.asarray(xs[1]) + b1, rtol=1e-5)


@pytest.mark.parametrize("learner", [
    lambda: (lambda xs, ys, k: make_online_learner(4, 3, 8, "adam")(xs, ys, k, 0.01)),
    lambda: MetaRNN(4, 3, hidden=16, key=jax.random.key(1)),
])
def test_online_learners_predict_before_the_label(learner):
    run = learner()
    xs = jax.random.normal(jax.random.key(2), (10, 4))
    ys = jax.random.randint(jax.random.key(3), (10,), 0, 3)
    base = run(xs, ys, jax.random.key(4))
    changed = run(xs, ys.at[6].set((ys[6] + 1) % 3), jax.random.key(4))
    np.testing.assert_array_equal(base[:7], changed[:7])
    assert not np.allclose(base[7], changed[7])


def test_online_learner_rejects_unknown_optimizer():
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        make_online_learner(4, 3, 0, "rmsprop")
