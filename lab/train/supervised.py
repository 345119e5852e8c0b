"""Supervised classification: a pure cross-entropy loss and a training loop in one jit.

``make_fit(optimizer, config)`` returns ``fit(model, x_train, y_train, x_test, y_test,
key)``, which runs every epoch (``lax.scan`` over epochs, and inside each over shuffled
minibatches) in a single compiled call and returns the trained model with per-epoch
metrics. Models take one example, as Equinox models do; batches go through ``jax.vmap``.
"""

from dataclasses import dataclass
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax


class Metrics(NamedTuple):
    loss: jax.Array
    accuracy: jax.Array


def cross_entropy(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, Metrics]:
    """Softmax cross-entropy, averaged over the batch.

    logits: (batch, classes) unnormalised log-probabilities; labels: (batch,) int.
    Returns ``(loss, Metrics(loss, accuracy))``.
    """
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected logits (B, C) and labels (B,), got {logits.shape} "
                         f"and {labels.shape}")
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    accuracy = (jnp.argmax(logits, -1) == labels).mean()
    return loss, Metrics(loss, accuracy)


def batch_loss(model, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Metrics]:
    return cross_entropy(jax.vmap(model)(x), y)


def minibatches(key: jax.Array, x: jax.Array, y: jax.Array, batch_size: int):
    """One epoch of shuffled minibatches, stacked for ``lax.scan``: shapes
    (steps, batch_size, ...). The last incomplete batch is dropped."""
    steps = x.shape[0] // batch_size
    if steps == 0:
        raise ValueError(f"batch_size {batch_size} exceeds the {x.shape[0]} training "
                         "examples; lower batch_size")
    order = jax.random.permutation(key, x.shape[0])[: steps * batch_size]
    return (x[order].reshape(steps, batch_size, *x.shape[1:]),
            y[order].reshape(steps, batch_size))


@eqx.filter_jit
def evaluate(model, x: jax.Array, y: jax.Array) -> Metrics:
    """Loss and accuracy of ``model`` on the whole of ``(x, y)``."""
    return batch_loss(model, x, y)[1]


@dataclass(frozen=True)
class ClassifierConfig:
    """A small MLP classifier trained with Adam."""

    epochs: int = 20
    """Passes over the training set."""
    batch_size: int = 64
    """Examples per step; the last incomplete batch of an epoch is dropped."""
    lr: float = 1e-3
    """Adam learning rate."""
    width: int = 64
    """Hidden units per layer."""
    depth: int = 2
    """Hidden layers."""
    seed: int = 0
    """Seeds the initialisation and the minibatch order."""

    def __post_init__(self):
        for name in ("epochs", "batch_size", "width", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


class History(NamedTuple):
    """Per-epoch metrics, each of shape (epochs,)."""

    train: Metrics  # averaged over the epoch's minibatches
    test: Metrics  # whole test set after the epoch


def make_fit(optimizer: optax.GradientTransformation, config: ClassifierConfig):
    """The whole training run as one function: ``fit(model, x, y, x_test, y_test, key)``."""

    @eqx.filter_jit
    def fit(model, x, y, x_test, y_test, key):
        params, static = eqx.partition(model, eqx.is_array)

        def step(carry, batch):
            params, opt_state = carry
            grads, metrics = jax.grad(
                lambda p: batch_loss(eqx.combine(p, static), *batch), has_aux=True)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), metrics

        def epoch(carry, epoch_key):
            batches = minibatches(epoch_key, x, y, config.batch_size)
            carry, metrics = jax.lax.scan(step, carry, batches)
            test = evaluate(eqx.combine(carry[0], static), x_test, y_test)
            return carry, History(jax.tree.map(jnp.mean, metrics), test)

        carry = (params, optimizer.init(params))
        (params, _), history = jax.lax.scan(epoch, carry, jax.random.split(key, config.epochs))
        return eqx.combine(params, static), history

    return fit


def train_classifier(config: ClassifierConfig, x_train, y_train, x_test, y_test):
    """Train an ``eqx.nn.MLP`` with Adam on flattened inputs; returns (model, History)."""
    init_key, data_key = jax.random.split(jax.random.key(config.seed))
    x_train, x_test = (jnp.asarray(x.reshape(len(x), -1)) for x in (x_train, x_test))
    classes = int(max(y_train.max(), y_test.max())) + 1
    model = eqx.nn.MLP(x_train.shape[1], classes, config.width, config.depth,
                       activation=jax.nn.relu, key=init_key)
    fit = make_fit(optax.adam(config.lr), config)
    return fit(model, x_train, jnp.asarray(y_train), x_test, jnp.asarray(y_test), data_key)
