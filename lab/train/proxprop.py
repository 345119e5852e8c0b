"""BackProp and ProxProp trained side by side through one code path.

``make_train(config, data)`` returns ``train(key, lr) -> Curves``: the whole run (every
epoch, every minibatch, the full-batch evaluation after each epoch) in one function that
``jax.vmap`` maps over seeds and learning rates, so a step-size grid over several seeds
is a single compiled call. ``make_epochs`` gives the same run one epoch at a time (for
the live panel). BackProp is ``solver="gradient"``: the same forward pass,
taps and optimizer, only the hidden layers' directions differ.

Each takes an optional ``mesh`` (:func:`lab.parallel.mesh`): every minibatch is then split
over the ``"data"`` devices and the parameters and optimizer state are replicated, or,
with a ``"model"`` axis above 1, each weight matrix is split over it along its larger axis
(the paper MLP's 4000-wide layers); XLA's partitioner inserts the collectives, and the
result equals the one-device result up to float rounding. Without a mesh nothing changes.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from lab import parallel
from lab.models import convnet, mlp
from lab.optim import ProxProp, value_and_direction
from lab.train.supervised import cross_entropy, minibatches

ARCHS = ("mlp", "conv")
OPTIMIZERS = ("nesterov", "adam", "sgd")


@dataclass(frozen=True)
class ProxPropConfig:
    """One training set-up; the step size is an argument of ``train`` so it can be vmapped."""

    arch: str = "mlp"
    """'mlp' (Linear layers of ``hidden`` widths) or 'conv' (``channels`` 5x5 convolutions)."""
    hidden: tuple[int, ...] = (400, 100, 400)
    """Hidden widths of the MLP."""
    channels: tuple[int, ...] = (16, 20, 20)
    """Convolution channels of the ConvNet (max-pool after the first two)."""
    solver: str = "exact"
    """ProxProp solver for hidden layers: 'exact', 'cgK' (cg3, cg5, cg10), 'colcgK' (the
    reference code's column-wise CG: colcg3, colcg10), or 'gradient' (BackProp)."""
    tau: float = 0.05
    """Proximal step size."""
    optimizer: str = "nesterov"
    """'nesterov' (SGD with Nesterov momentum), 'adam' or 'sgd'."""
    momentum: float = 0.95
    """Momentum of 'nesterov'."""
    epochs: int = 30
    """Passes over the training set."""
    batch_size: int = 100
    """Examples per step."""

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; choose one of {', '.join(ARCHS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; "
                             f"choose one of {', '.join(OPTIMIZERS)}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        ProxProp(self.tau, self.solver)  # validates tau and solver
        if self.arch == "conv" and self.solver == "exact":
            raise ValueError("solver 'exact' handles Linear layers only; with arch 'conv' use "
                             "cg3, cg5 or cg10")

    @property
    def prox(self) -> ProxProp:
        return ProxProp(self.tau, self.solver)


class Curves(NamedTuple):
    """Full-batch metrics before training and after each epoch: shape (epochs + 1,)."""

    train_loss: jax.Array
    val_loss: jax.Array
    val_accuracy: jax.Array


def as_inputs(x: np.ndarray, arch: str) -> np.ndarray:
    """Flat vectors for the MLP; (channels, height, width) images for the ConvNet.
    Accepts digits' flat 64-vectors (8x8), (n, h, w) and (n, h, w, c) image arrays."""
    if arch == "mlp":
        return x.reshape(len(x), -1)
    if x.ndim == 2:
        side = int(round(np.sqrt(x.shape[1])))
        if side * side != x.shape[1]:
            raise ValueError(f"arch 'conv' needs square images; inputs have {x.shape[1]} "
                             "features: use arch 'mlp'")
        return x.reshape(len(x), 1, side, side)
    return x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)


def build_model(config: ProxPropConfig, input_shape: tuple[int, ...], classes: int, *, key):
    if config.arch == "mlp":
        return mlp([int(np.prod(input_shape)), *config.hidden, classes], key=key)
    return convnet(input_shape[0], input_shape[1], classes, config.channels, key=key)


def make_optimizer(config: ProxPropConfig, lr) -> optax.GradientTransformation:
    if config.optimizer == "nesterov":
        return optax.sgd(lr, momentum=config.momentum, nesterov=True)
    return optax.adam(lr) if config.optimizer == "adam" else optax.sgd(lr)


def make_step(optimizer: optax.GradientTransformation, prox: ProxProp, loss_fn=cross_entropy):
    """One jit-compiled training step: ``step(model, opt_state, x, y) -> (model, opt_state,
    aux)``, with ProxProp directions (plain gradients for ``solver="gradient"``) fed to any
    optax ``optimizer`` in place of gradients."""

    @eqx.filter_jit
    def step(model, opt_state, x, y):
        (_, aux), direction = value_and_direction(model, x, y, loss_fn, prox)
        params = eqx.filter(model, eqx.is_array)
        updates, opt_state = optimizer.update(eqx.filter(direction, eqx.is_array), opt_state,
                                              params)
        return eqx.apply_updates(model, updates), opt_state, aux

    return step


class Epochs(NamedTuple):
    """A run cut into epochs, for loops that report between them (the live panel).

    ``init(key, lr) -> (state, Curves)``: a fresh model and optimizer state, and the curves
    before training; ``epoch(state, lr, key) -> (state, Curves)``: one pass over the shuffled
    training set, then the full-batch curves. ``state`` is ``(params, opt_state)``;
    ``model(state)`` is the Equinox model it holds. Both are pure and can be jitted."""

    init: Callable
    epoch: Callable
    model: Callable


def make_epochs(config: ProxPropConfig, x, y, x_val, y_val, *, mesh: Mesh | None = None
                ) -> Epochs:
    """:class:`Epochs` for inputs already shaped by :func:`as_inputs`.

    With ``mesh``, ``config.batch_size`` must divide over its ``"data"`` devices. The
    full-batch evaluation splits its rows over them too when they divide (CIFAR-10's 50,000
    and 10,000 over 8); otherwise every device evaluates all of them (digits' 1,438)."""
    if mesh is not None:  # one-line error before any work, as for a notebook's `devices`
        parallel.check_devices(mesh.devices.size, mesh.shape["model"],
                               batch_size=config.batch_size)
    x, y, x_val, y_val = (jnp.asarray(a) for a in (x, y, x_val, y_val))
    classes = int(max(y.max(), y_val.max())) + 1
    prox = config.prox
    _, static = eqx.partition(build_model(config, x.shape[1:], classes, key=jax.random.key(0)),
                              eqx.is_array)

    def rows(inputs, labels):
        if mesh is None or len(inputs) % mesh.shape["data"]:
            return inputs, labels
        return parallel.constrain_batch((inputs, labels), mesh)

    def curves(params) -> Curves:
        model = eqx.combine(parallel.constrain_params(params, mesh), static)
        (inputs, labels), (val_inputs, val_labels) = rows(x, y), rows(x_val, y_val)
        train_loss = cross_entropy(jax.vmap(model)(inputs), labels)[0]
        val_loss, val = cross_entropy(jax.vmap(model)(val_inputs), val_labels)
        return Curves(train_loss, val_loss, val.accuracy)

    def init(key, lr):
        params = eqx.filter(build_model(config, x.shape[1:], classes, key=key), eqx.is_array)
        state = parallel.constrain_params((params, make_optimizer(config, lr).init(params)),
                                          mesh)
        return state, curves(state[0])

    def epoch(state, lr, key):
        step = make_step(make_optimizer(config, lr), prox)

        def scan_step(state, batch):
            params, opt_state = parallel.constrain_params(state, mesh)
            model, opt_state, _ = step(eqx.combine(params, static), opt_state,
                                       *parallel.constrain_batch(batch, mesh))
            return parallel.constrain_params((eqx.filter(model, eqx.is_array), opt_state),
                                             mesh), None

        state, _ = jax.lax.scan(scan_step, state, minibatches(key, x, y, config.batch_size))
        return state, curves(state[0])

    return Epochs(init, epoch, lambda state: eqx.combine(state[0], static))


def make_train(config: ProxPropConfig, x, y, x_val, y_val, *, mesh: Mesh | None = None):
    """``train(key, lr) -> Curves`` for inputs already shaped by :func:`as_inputs`: every
    epoch of :func:`make_epochs` (with its ``mesh``) in one ``lax.scan``."""
    epochs = make_epochs(config, x, y, x_val, y_val, mesh=mesh)

    def train(key, lr):
        init_key, data_key = jax.random.split(key)
        state, first = epochs.init(init_key, lr)
        keys = jax.random.split(data_key, config.epochs)
        _, history = jax.lax.scan(lambda state, key: epochs.epoch(state, lr, key), state, keys)
        return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]),
                            first, history)

    return train


def timed_grid(config: ProxPropConfig, data, lrs, seeds: int, *, mesh: Mesh | None = None
               ) -> tuple[Curves, float]:
    """Every (seed, lr) pair in one compiled call: curves of shape (seeds, lrs, epochs+1), and
    the wall-clock seconds per epoch of that call once compiled (its time over seeds x lrs x
    epochs; each run's evaluation before training is counted in).

    The pairs run one after another (``lax.map``), not batched with ``vmap``: on the CPU,
    XLA (jaxlib 0.10.2) deadlocks running the exact solver's batched Cholesky inside the
    training scan, and batching would not be faster on 2 cores anyway. With ``mesh`` each
    run's minibatches are split over its devices (:func:`make_epochs`)."""
    train = make_train(config, *data, mesh=mesh)
    keys = jax.random.split(jax.random.key(0), seeds)
    lrs = jnp.asarray(lrs, jnp.float32)
    pairs = (jnp.repeat(keys, len(lrs), axis=0), jnp.tile(lrs, seeds))
    run = jax.jit(lambda pairs: jax.lax.map(lambda p: train(*p), pairs)).lower(pairs).compile()
    start = time.perf_counter()
    curves = jax.block_until_ready(run(pairs))
    seconds = (time.perf_counter() - start) / (seeds * len(lrs) * config.epochs)
    return jax.tree.map(lambda c: c.reshape(seeds, len(lrs), -1), curves), seconds


def train_grid(config: ProxPropConfig, data, lrs, seeds: int, *, mesh: Mesh | None = None
               ) -> Curves:
    """The curves of :func:`timed_grid`."""
    return timed_grid(config, data, lrs, seeds, mesh=mesh)[0]


def seconds_per_epoch(config: ProxPropConfig, data, lr: float, *, repeats: int = 3,
                      mesh: Mesh | None = None) -> float:
    """Wall-clock seconds of one epoch (training steps plus the full-batch evaluation),
    compiled, for one seed: the fastest of ``repeats`` timed runs after a warm-up run."""
    train = jax.jit(make_train(config, *data, mesh=mesh))
    key = jax.random.key(0)
    jax.block_until_ready(train(key, lr))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(train(key, lr))
        times.append(time.perf_counter() - start)
    return min(times) / config.epochs
