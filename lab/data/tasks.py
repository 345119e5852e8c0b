"""Online classification tasks for meta-learning, sampled inside jit.

A task draws a random linear projection of the inputs to a fixed size, a random subset of
the classes and a random permutation of their labels, then a stream of examples from
those classes (Kirsch & Schmidhuber 2021, Section 4). Meta-training on one dataset and
meta-testing on others needs only the same projected input size.

:class:`FixedTaskSource` is the other kind, the one the authors' code meta-trains on by
default (``configs/default.yaml``: MNIST, ``rand_proj: False``): the dataset itself is the
task, its own features and its own labels, every episode a fresh draw of examples; with
``projections=k``, half of its episodes see the features through one of ``k`` fixed random
projections (the authors' ``rand_proj: mpi_split [False, True]``).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class TaskSource(eqx.Module):
    """A labelled dataset to draw tasks from: ``source.sample(key) -> (xs, ys)``."""

    x: jax.Array  # (n, features), standardised here per feature
    y: jax.Array  # (n,) labels in [0, n_classes)
    n_classes: int = eqx.field(static=True)
    inputs: int = eqx.field(static=True)
    classes: int = eqx.field(static=True)
    steps: int = eqx.field(static=True)

    def __init__(self, x, y, *, inputs: int, classes: int, steps: int):
        x, y = np.asarray(x, np.float32).reshape(len(x), -1), np.asarray(y, np.int32)
        n_classes = int(y.max()) + 1
        if steps < 1:
            raise ValueError(f"episode length must be at least 1, got {steps}")
        if not 2 <= classes <= n_classes:
            raise ValueError(f"a task needs 2 to {n_classes} classes of this data, got {classes}")
        if inputs < 1:
            raise ValueError(f"inputs must be at least 1, got {inputs}")
        std = x.std(0)
        x = (x - x.mean(0)) / np.where(std > 0, std, 1.0)
        self.x, self.y = jnp.asarray(x), jnp.asarray(y)
        self.n_classes, self.inputs, self.classes, self.steps = n_classes, inputs, classes, steps

    def sample(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A stream ``(xs (steps, inputs), ys (steps,))`` with labels in [0, classes).
        The projection is Gaussian with variance 1/features: features keep unit scale."""
        k_proj, k_classes, k_examples = jax.random.split(key, 3)
        features = self.x.shape[1]
        projection = jax.random.normal(k_proj, (features, self.inputs)) / jnp.sqrt(features)
        chosen = jax.random.permutation(k_classes, self.n_classes)[: self.classes]
        relabel = jnp.full(self.n_classes, -1).at[chosen].set(jnp.arange(self.classes))
        labels = relabel[self.y]
        weights = (labels >= 0).astype(jnp.float32)
        index = jax.random.choice(k_examples, self.y.shape[0], (self.steps,),
                                  p=weights / weights.sum())
        return self.x[index] @ projection, labels[index]


class FixedTaskSource(eqx.Module):
    """A dataset as one fixed task: ``source.sample(key) -> (xs, ys)``, ``steps`` examples
    drawn without replacement from the whole dataset, with its own features (no
    projection) and its own labels (no subset, no relabelling), as Kirsch & Schmidhuber's
    ``data.py`` builds MNIST episodes by default. The features are standardised with one
    ``mean`` and ``std`` for all of them (their ``dataset_standard``: MNIST's pixel mean
    and standard deviation, which their config also gives Fashion-MNIST), so a learner
    sees every dataset on one scale."""

    x: jax.Array  # (n, features), (x - mean) / std
    y: jax.Array  # (n,) labels in [0, classes)
    projections: jax.Array | None  # (k, features, features) fixed, or None: own features
    inputs: int = eqx.field(static=True)
    classes: int = eqx.field(static=True)
    steps: int = eqx.field(static=True)

    def __init__(self, x, y, *, steps: int, mean: float, std: float, classes: int | None = None,
                 projections: int = 0, projection_seed: int = 0):
        x, y = np.asarray(x, np.float32).reshape(len(x), -1), np.asarray(y, np.int32)
        classes = int(y.max()) + 1 if classes is None else classes
        if not 1 <= steps <= len(x):
            raise ValueError(f"episode length must be 1 to {len(x)} (the examples, drawn "
                             f"without replacement), got {steps}")
        if y.min() < 0 or y.max() >= classes:
            raise ValueError(f"labels must lie in [0, {classes}), got {y.min()}..{y.max()}")
        if not std > 0:
            raise ValueError(f"std must be positive, got {std}")
        if projections < 0:
            raise ValueError(f"projections must be 0 (none) or more, got {projections}")
        self.x, self.y = jnp.asarray((x - mean) / std), jnp.asarray(y)
        self.inputs, self.classes, self.steps = x.shape[1], classes, steps
        self.projections = None if not projections else jnp.asarray(
            fixed_projections(projections, x.shape[1], projection_seed))

    def sample(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A stream ``(xs (steps, inputs), ys (steps,))`` of distinct examples; with
        projections, the episode's features go through one of them (drawn uniformly) with
        probability 1/2, the labels unchanged."""
        if self.projections is None:
            index = jax.random.choice(key, self.y.shape[0], (self.steps,), replace=False)
            return self.x[index], self.y[index]
        k_index, k_project, k_which = jax.random.split(key, 3)
        index = jax.random.choice(k_index, self.y.shape[0], (self.steps,), replace=False)
        xs = self.x[index]
        chosen = self.projections[jax.random.randint(k_which, (), 0, self.projections.shape[0])]
        return jnp.where(jax.random.bernoulli(k_project), xs @ chosen, xs), self.y[index]


def fixed_projections(count: int, features: int, seed: int = 0) -> np.ndarray:
    """``count`` fixed ``features x features`` projections drawn as the authors' ``data.py``
    draws its ``rand_proj`` matrix: uniform on +-sqrt(6 / (2 features)) (Glorot), once."""
    limit = np.sqrt(6 / (2 * features))
    return np.random.default_rng(seed).uniform(-limit, limit, (count, features, features)
                                               ).astype(np.float32)
