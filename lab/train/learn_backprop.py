"""Learning backprop: teach the shared VS-ML cell to run online SGD in forward mode.

Kirsch & Schmidhuber, "Meta Learning Backpropagation And Improving It", NeurIPS 2021: before
meta-learning new learning algorithms, they show that the tiny LSTMs of a VS-ML layer can
*implement* backpropagation, by training the shared cell with supervised targets that a
plain linear layer trained by SGD would produce. This module is that experiment.

**The idea.** In a dense VS-ML layer every weight ``w_ab`` is a sub-LSTM that sees only its
own input ``x_a`` (forward message, channel 0) and its own output's error ``e_b`` (backward
message, channel 0). SGD on a linear layer needs nothing more: the weight's update
``-alpha x_a e_b``, its forward contribution ``x_a w_ab`` and its backward contribution
``e_b w_ab`` are all local to the pair. So we can ask every pair, independently, to behave
like one SGD-trained weight, and the layer as a whole then *is* SGD.

**The teacher, with the network's exact timing** (:class:`lab.models.VSMLNetwork.step`). At
online step t a pair sees ``x_t`` and the error of the *previous* prediction, ``e_{t-1}``
(``e_{-1} = 0``), and runs ``ticks`` micro-ticks. Its weight is the first state channel,
``w_0 = c[..., 0]`` at the episode start (drawn ``~ N(0, 1/A)`` by
:func:`lab.models.vsml.init_layer_state`), and

    w_t = w_{t-1} - alpha x_{t-1} e_{t-1}  =  w_0 - alpha sum_{k < t} x_k e_k.

The cell has to remember ``x_{t-1}`` in its state for one step. After the step's last tick
the targets are

    forward message, channel 1:  x_t w_t     (the pair's share of the prediction)
    backward message, channel 0: e_{t-1} w_t (the error sent to the layer below)
    state c[..., 0]:             w_t         (the weight itself)

The backward target uses the updated weight ``w_t`` rather than ``w_{t-1}`` (the weight that
made the prediction whose error it is). The two differ by ``alpha x_{t-1} e_{t-1}^2``, and
``e_{t-1} w_t`` is the same product of a stored weight and an incoming message as the forward
target, so one mechanism serves both. A one-layer network never uses this message.

**What the layer then computes.** The layer averages the forward messages over its inputs,
so its prediction is ``z_t = mean_a x_a w_ab = x_t W_t / A``. The gradient of the
cross-entropy of ``softmax(z)`` and the label with respect to ``W_ab`` is ``x_a e_b / A``
(``e = softmax(z) - onehot(y)``), so the teacher's update ``W <- W - alpha outer(x, e)`` is SGD
with step ``alpha A`` on the model ``z = x W / A`` (step ``alpha / A`` on ``V = W / A`` of the
usual ``z = x V``). :func:`sgd_reference` runs exactly that, so a VS-ML network with the
trained cell can be drawn beside it.

**Training.** Every pair is independent, so the cell is trained on a batch of single-pair
streams (a pair run as a 1 x 1 layer produces exactly its share of a larger layer's
messages): ``x_t ~ N(0, 1)``, ``e_t = softmax(z)_0 - [y = 0]`` for random logits ``z`` of
random scale over ``classes`` and a uniform label ``y``, and the initial state drawn as the
network draws it. The loss is the relative mean squared error of each target, step by
step, summed over the targets.
``make_learn_backprop(config)`` returns ``train(cell, key)`` with every iteration (Adam,
gradient clipping, cosine-decayed step size) inside one ``lax.scan``.
"""

from dataclasses import dataclass
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from lab.models.vsml import VSMLCell, init_layer_state


@dataclass(frozen=True)
class BackpropConfig:
    """How the cell is taught SGD; every field is validated in one place."""

    alpha: float = 1.0
    """The teacher's step: ``w_t = w_{t-1} - alpha x_{t-1} e_{t-1}``. SGD with step
    ``alpha * inputs`` on ``z = x W / inputs``. The default is near the best online SGD step
    on the digits, wine, iris and breast-cancer tasks over 100 examples
    (:func:`lab.experiments.vsml_backprop.sgd_sweep` measures it)."""
    inputs: int = 16
    """Fan-in A of the layers the cell will run in: the initial weight is ``~ N(0, 1/A)``."""
    classes: int = 3
    """Width of the softmax the training errors are drawn from."""
    logit_scale: float = 3.0
    """Training errors come from logits ``s * N(0, 1)`` with ``s ~ U(0, logit_scale)`` per
    stream: from near-uniform predictions (large errors) to confident ones."""
    iterations: int = 6000
    """Adam steps on the cell (about 6 ms each on two CPU cores at the default sizes)."""
    pairs: int = 64
    """Independent single-pair streams per step."""
    steps: int = 50
    """Online steps per training stream (each of ``ticks`` micro-ticks)."""
    ticks: int = 2
    """Micro-ticks per online step; must match the network's (VSMLNetwork's default 2)."""
    lr: float = 3e-2
    """Adam's initial step size, cosine-decayed to ``lr * lr_end`` over the iterations."""
    lr_end: float = 0.1
    """The final step size as a fraction of ``lr``."""
    clip: float = 1.0
    """Global-norm gradient clipping."""

    def __post_init__(self):
        for name in ("inputs", "iterations", "pairs", "steps", "ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.classes < 2:
            raise ValueError(f"classes must be at least 2, got {self.classes}")
        for name in ("alpha", "lr", "clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.lr_end <= 1:
            raise ValueError(f"lr_end is a fraction of lr in (0, 1], got {self.lr_end}")
        if not self.logit_scale >= 0:
            raise ValueError(f"logit_scale must be non-negative, got {self.logit_scale}")


class Targets(NamedTuple):
    """One value per step and pair, each (T, P): what the pair sends and stores."""

    fwd: jax.Array  # forward message, channel 1
    bwd: jax.Array  # backward message, channel 0
    w: jax.Array  # state c[..., 0]


class Imitation(NamedTuple):
    """:func:`relative_error` of each target (0: perfect; 1: as bad as always sending 0).
    ``sum(imitation)`` is the training loss."""

    fwd: jax.Array
    bwd: jax.Array
    w: jax.Array


class Streams(NamedTuple):
    """Training data for P independent pairs."""

    xs: jax.Array  # (T, P) the input x_t
    es: jax.Array  # (T, P) the error e_t of step t's prediction (seen by the pair at t + 1)
    state: tuple[jax.Array, jax.Array]  # (h, c), each (P, state): the episode start


def seen_errors(es: jax.Array) -> jax.Array:
    """The error each step sees: ``e_{t-1}``, with ``e_{-1} = 0``. (T, ...) -> (T, ...)."""
    return jnp.concatenate([jnp.zeros_like(es[:1]), es[:-1]])


def teacher(xs: jax.Array, es: jax.Array, w0: jax.Array, alpha: float) -> Targets:
    """What an SGD-trained weight would send and store at each step.

    xs, es: (T, P) the input and the error of each step's prediction; w0: (P,) the initial
    weights. ``w_t = w0 - alpha sum_{k < t} x_k e_k``; returns ``Targets(x_t w_t,
    e_{t-1} w_t, w_t)``, each (T, P)."""
    if xs.ndim != 2 or es.shape != xs.shape or w0.shape != xs.shape[1:]:
        raise ValueError(f"expected xs and es (T, P) and w0 (P,), got {xs.shape}, {es.shape} "
                         f"and {w0.shape}")
    ws = w0 - alpha * jnp.cumsum(seen_errors(xs * es), axis=0)
    return Targets(xs * ws, seen_errors(es) * ws, ws)


def pair_outputs(cell: VSMLCell, xs: jax.Array, es: jax.Array, state, ticks: int) -> Targets:
    """The cell's own values for :class:`Targets`, each pair run as a 1 x 1 VS-ML layer.

    Same timing as :meth:`lab.models.VSMLNetwork.step`: at step t, ``x_t`` in forward
    channel 0, ``e_{t-1}`` in backward channel 0, ``ticks`` micro-ticks, then read the
    messages and ``c[..., 0]``. xs, es: (T, P); state: (h, c) each (P, state)."""
    m = cell.message_size

    def one_pair(xs, seen, h, c):
        def step(hc, example):
            x, e = example
            fwd = jnp.zeros((1, m)).at[0, 0].set(x)
            bwd = jnp.zeros((1, m)).at[0, 0].set(e)
            for _ in range(ticks):
                fwd_out, bwd_out, hc = cell.tick(fwd, bwd, hc)
            return hc, Targets(fwd_out[0, 1], bwd_out[0, 0], hc[1][0, 0, 0])

        return jax.lax.scan(step, (h[None, None], c[None, None]), (xs, seen))[1]

    return jax.vmap(one_pair, in_axes=(1, 1, 0, 0), out_axes=1)(xs, seen_errors(es), *state)


def relative_error(out: jax.Array, target: jax.Array) -> jax.Array:
    """Mean over steps of ``mean_p (out - target)^2 / mean_p target^2`` for (T, P) arrays.

    Per step, because the weights grow along a stream: pooled over the stream, the first
    steps (small weights, small predictions, yet every early prediction counts) would
    hardly weigh. A step whose targets are all 0 (the backward message at t = 0, before any
    error arrived) counts its plain mean squared error."""
    if out.ndim != 2 or out.shape != target.shape:
        raise ValueError(f"expected outputs and targets of the same shape (T, P), got "
                         f"{out.shape} and {target.shape}")
    mse, scale = jnp.mean((out - target) ** 2, 1), jnp.mean(target ** 2, 1)
    return jnp.mean(jnp.where(scale > 0, mse / jnp.where(scale > 0, scale, 1.0), mse))


def imitation_loss(outputs: Targets, targets: Targets) -> tuple[jax.Array, Imitation]:
    """Sum over the three targets of their :func:`relative_error`. Returns ``(loss,
    Imitation)``."""
    errors = Imitation(*map(relative_error, outputs, targets))
    return sum(errors), errors


def random_streams(key: jax.Array, config: BackpropConfig, state_size: int, *,
                   pairs: int | None = None, steps: int | None = None) -> Streams:
    """``pairs`` (default ``config.pairs``) independent streams of ``steps`` (default
    ``config.steps``) steps: ``x ~ N(0, 1)``; ``e = softmax(z)_0 - [y = 0]`` with ``z ~ s
    N(0, 1)`` over ``config.classes``, ``s ~ U(0, logit_scale)`` per stream and ``y``
    uniform; the initial state drawn by the network's own rule for fan-in ``config.inputs``."""
    pairs = config.pairs if pairs is None else pairs
    steps = config.steps if steps is None else steps
    k_x, k_scale, k_logits, k_labels, k_state = jax.random.split(key, 5)
    xs = jax.random.normal(k_x, (steps, pairs))
    scale = jax.random.uniform(k_scale, (1, pairs, 1), maxval=config.logit_scale)
    logits = scale * jax.random.normal(k_logits, (steps, pairs, config.classes))
    labels = jax.random.randint(k_labels, (steps, pairs), 0, config.classes)
    es = jax.nn.softmax(logits)[..., 0] - (labels == 0)
    h, c = init_layer_state(k_state, config.inputs, pairs, state_size)  # (inputs, pairs, s)
    return Streams(xs, es, (h[0], c[0]))  # one row of a layer: pairs with fan-in `inputs`


def batch_imitation(cell: VSMLCell, key: jax.Array, config: BackpropConfig, *,
                    pairs: int | None = None, steps: int | None = None):
    """The cell on fresh random streams: ``(loss, Imitation)``."""
    xs, es, state = random_streams(key, config, cell.state_size, pairs=pairs, steps=steps)
    targets = teacher(xs, es, state[1][:, 0], config.alpha)
    return imitation_loss(pair_outputs(cell, xs, es, state, config.ticks), targets)


def make_learn_backprop(config: BackpropConfig):
    """``train(cell, key) -> (cell, Imitation)``: ``config.iterations`` Adam steps on fresh
    random streams, all inside one jit; the errors are one value per iteration."""
    schedule = optax.cosine_decay_schedule(config.lr, config.iterations, config.lr_end)
    optimizer = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(schedule))

    @eqx.filter_jit
    def train(cell: VSMLCell, key: jax.Array):
        params, static = eqx.partition(cell, eqx.is_array)

        def loss(params, key):
            return batch_imitation(eqx.combine(params, static), key, config)

        def iteration(carry, key):
            params, opt_state = carry
            (_, errors), grads = jax.value_and_grad(loss, has_aux=True)(params, key)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), errors

        keys = jax.random.split(key, config.iterations)
        (params, _), errors = jax.lax.scan(iteration, (params, optimizer.init(params)), keys)
        return eqx.combine(params, static), errors

    return train


def sgd_reference(xs: jax.Array, ys: jax.Array, w0: jax.Array, alpha: float) -> jax.Array:
    """The online SGD the cell is taught, run on a labelled stream: logits (T, classes).

    xs: (T, A) inputs; ys: (T,) labels; w0: (A, classes) the initial weights (the network's
    ``c[..., 0]``). At step t: predict ``z_t = x_t W_t / A`` (before seeing ``y_t``), then
    ``W_{t+1} = W_t - alpha outer(x_t, softmax(z_t) - onehot(y_t))``. The network soft-clips
    its logits to ``100 tanh(z / 100)``; this reference does not (the same for ``|z|`` << 100).
    """
    if xs.ndim != 2 or ys.shape != xs.shape[:1] or w0.ndim != 2 or w0.shape[0] != xs.shape[1]:
        raise ValueError(f"expected xs (T, A), ys (T,) and w0 (A, classes), got {xs.shape}, "
                         f"{ys.shape} and {w0.shape}")
    inputs, classes = w0.shape

    def step(w, example):
        x, y = example
        logits = x @ w / inputs
        error = jax.nn.softmax(logits) - jax.nn.one_hot(y, classes)
        return w - alpha * jnp.outer(x, error), logits

    return jax.lax.scan(step, w0, (xs, ys))[1]
