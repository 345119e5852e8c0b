import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.data import load
from lab.train import ClassifierConfig, cross_entropy, train_classifier


def test_cross_entropy_matches_hand_computed_values():
    logits = jnp.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    labels = jnp.array([1, 0])
    loss, aux = cross_entropy(logits, labels)
    # row 1: uniform over 3 classes -> log 3; row 2: -log(e^2 / (e^2 + 2))
    expected = (np.log(3.0) - np.log(np.e**2 / (np.e**2 + 2))) / 2
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(aux.accuracy, 0.5)  # row 1 is a tie, argmax picks class 0


def test_cross_entropy_gradient_is_softmax_minus_onehot():
    logits = jnp.array([[0.3, -1.2, 2.0]])
    grad = jax.grad(lambda z: cross_entropy(z, jnp.array([2]))[0])(logits)
    np.testing.assert_allclose(grad, jax.nn.softmax(logits) - jnp.array([[0, 0, 1.0]]),
                               rtol=1e-6)


def test_cross_entropy_checks_shapes():
    with pytest.raises(ValueError, match="expected logits"):
        cross_entropy(jnp.zeros((4, 3)), jnp.zeros((3,), int))


def test_classifier_config_rejects_bad_values():
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        ClassifierConfig(epochs=0)
    with pytest.raises(ValueError, match="lr must be positive"):
        ClassifierConfig(lr=-1.0)


def test_train_classifier_learns_sum_sign_and_is_deterministic():
    data = load("sum_sign", "train") + load("sum_sign", "test")
    config = ClassifierConfig(epochs=5, batch_size=32, width=16, depth=1, lr=1e-2)
    _, history = train_classifier(config, *data)
    assert history.train.loss.shape == (5,)
    assert history.train.loss[-1] < 0.5 * history.train.loss[0]
    assert history.test.accuracy[-1] > 0.9  # a linear rule: an MLP finds it quickly
    _, again = train_classifier(config, *data)
    np.testing.assert_array_equal(history.test.loss, again.test.loss)


def test_train_classifier_refuses_a_batch_larger_than_the_data():
    x, y = load("iris", "train")
    with pytest.raises(ValueError, match="batch_size 1000 exceeds"):
        train_classifier(ClassifierConfig(batch_size=1000, epochs=1), x, y, x, y)
