"""The candidates of causal model selection: many small regression MLPs that differ only in
their seed (initialisation and minibatch order), trained together with ``jax.vmap`` inside
one jit.

    models = candidates(jax.random.key(0), count=100, inputs=5, hidden=32)
    models, log = train(models, keys, x, y, x_stop, y_stop, Schedule(steps=500, lr=1e-2))
    predictions = predict(models, x)          # (count, n)

Each model maps one example's inputs ``(inputs,)`` to a scalar; the loss is the mean squared
error. Training can stop early as the official code's Keras models do (``EarlyStopping`` with
a patience, ``ModelCheckpoint`` keeping the best weights): every ``every`` steps the loss on
a stopping split ``(x_stop, y_stop)`` is measured; the best weights so far are kept, and after
``patience`` measurements without an improvement of ``min_delta`` the weights stop changing.
Seeds then differ in where they stop, not only in where they start. ``train`` is pure: the
same keys and data give the same models, whether the models are trained together (vmapped)
or one at a time (a test checks it).
"""

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lab.models.feedforward import mlp
from lab.train import checkpoint

OPTIMIZERS = ("adam", "sgd")
NETWORKS = ("tanh", "keras")


class Schedule(NamedTuple):
    """How every candidate trains (hashable: it is a static argument of the jit)."""

    steps: int
    batch: int = 64
    lr: float = 3e-3
    optimizer: str = "adam"  # or "sgd": momentum 0.9, as the official code's
    every: int = 0  # steps between stopping-split measurements; 0: no early stopping
    patience: int = 2  # measurements without improvement before the weights stop changing
    min_delta: float = 1e-4


def candidates(key: jax.Array, count: int, inputs: int, hidden: int | Sequence[int] = 32,
               network: str = "tanh") -> eqx.Module:
    """``count`` MLPs ``inputs -> hidden... -> 1`` stacked on a leading axis (``hidden`` an int:
    two layers of that width). ``network``: ``tanh`` (Equinox's initialisation) or ``keras``,
    the official code's Keras ``Dense`` layers: ReLU, Glorot-uniform weights, zero biases."""
    widths = (hidden, hidden) if isinstance(hidden, int) else tuple(hidden)
    if count < 1 or inputs < 1 or not widths or min(widths) < 1:
        raise ValueError(f"count, inputs and every hidden width must be at least 1, got "
                         f"{count}, {inputs}, {list(widths)}")
    if network not in NETWORKS:
        raise ValueError(f"unknown network {network!r}; use one of {', '.join(NETWORKS)}")
    sizes = [inputs, *widths, 1]
    activation = jnp.tanh if network == "tanh" else jax.nn.relu

    def make(k):
        model = mlp(sizes, activation=activation, key=k)
        if network == "keras":
            linear = [layer for layer in model.layers if isinstance(layer, eqx.nn.Linear)]
            subkeys = jax.random.split(jax.random.fold_in(k, 1), len(linear))
            weights = [jax.random.uniform(sub, layer.weight.shape, minval=-1.0, maxval=1.0)
                       * jnp.sqrt(6.0 / sum(layer.weight.shape))
                       for sub, layer in zip(subkeys, linear, strict=True)]
            model = eqx.tree_at(lambda m: [layer.weight for layer in m.layers
                                           if isinstance(layer, eqx.nn.Linear)], model, weights)
            model = eqx.tree_at(lambda m: [layer.bias for layer in m.layers
                                           if isinstance(layer, eqx.nn.Linear)], model,
                                [jnp.zeros_like(layer.bias) for layer in linear])
        return model

    return eqx.filter_vmap(make)(jax.random.split(key, count))


def mse(model: eqx.Module, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x)[:, 0] - y) ** 2)


def optimizer_of(schedule: Schedule) -> optax.GradientTransformation:
    if schedule.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {schedule.optimizer!r}; use one of "
                         f"{', '.join(OPTIMIZERS)}")
    if schedule.optimizer == "sgd":
        return optax.sgd(schedule.lr, momentum=0.9)
    return optax.adam(schedule.lr)


def _parts(model: eqx.Module, x: jax.Array, y: jax.Array, x_stop: jax.Array,
           y_stop: jax.Array, schedule: Schedule):
    """``(carry, step, finish)`` of one model's training: the first carry, the scan's step
    ``(carry, (i, key)) -> (carry, (loss, held))`` and ``finish(carry) -> (model,
    stopped_at)``. ``train_one`` scans every step at once; ``train`` with ``progress`` scans
    them a piece at a time, with the same step."""
    optimizer = optimizer_of(schedule)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    pick = lambda c, a, b: jax.tree.map(lambda u, v: jnp.where(c, u, v), a, b)  # noqa: E731

    def step(carry, inputs):
        params, state, best, best_loss, bad, stopped_at = carry
        i, key = inputs
        rows = jax.random.randint(key, (schedule.batch,), 0, x.shape[0])
        loss, grads = jax.value_and_grad(
            lambda p: mse(eqx.combine(p, static), x[rows], y[rows]))(params)
        updates, new_state = optimizer.update(grads, state, params)
        running = stopped_at == schedule.steps
        params = pick(running, optax.apply_updates(params, updates), params)
        state = pick(running, new_state, state)
        if schedule.every:
            def check(best, best_loss, bad, stopped_at):
                held = mse(eqx.combine(params, static), x_stop, y_stop)
                better = running & (held < best_loss - schedule.min_delta)
                bad = jnp.where(better, 0, bad + running.astype(bad.dtype))
                stopped_at = jnp.where(running & (bad >= schedule.patience), i + 1,
                                       stopped_at)
                return (pick(better, params, best), jnp.where(better, held, best_loss), bad,
                        stopped_at, jnp.where(running, held, jnp.nan))

            def skip(best, best_loss, bad, stopped_at):
                return best, best_loss, bad, stopped_at, jnp.asarray(jnp.nan, best_loss.dtype)

            # the step is the same for every candidate: a real branch, measured only when due
            best, best_loss, bad, stopped_at, held = jax.lax.cond(
                (i + 1) % schedule.every == 0, check, skip, best, best_loss, bad, stopped_at)
        else:
            held = jnp.asarray(jnp.nan)
        return (params, state, best, best_loss, bad, stopped_at), (loss, held)

    def finish(carry):
        params, _, best, _, _, stopped_at = carry
        return eqx.combine(best if schedule.every else params, static), stopped_at

    carry = (params, optimizer.init(params), params, jnp.asarray(jnp.inf), jnp.asarray(0),
             jnp.asarray(schedule.steps))
    return carry, step, finish


def _inputs(key: jax.Array, schedule: Schedule) -> tuple[jax.Array, jax.Array]:
    """Each step's index and minibatch key."""
    return jnp.arange(schedule.steps), jax.random.split(key, schedule.steps)


def train_one(model: eqx.Module, key: jax.Array, x: jax.Array, y: jax.Array,
              x_stop: jax.Array, y_stop: jax.Array, schedule: Schedule
              ) -> tuple[eqx.Module, dict[str, jax.Array]]:
    """``schedule.steps`` steps on minibatches drawn with ``key`` (``lax.scan``); returns the
    best model on the stopping split (the last one without early stopping) and a log: the
    minibatch loss per step, the stopping-split loss where measured (NaN elsewhere), and the
    step at which the weights stopped changing (``steps`` if they never did)."""
    carry, step, finish = _parts(model, x, y, x_stop, y_stop, schedule)
    carry, (losses, held) = jax.lax.scan(step, carry, _inputs(key, schedule))
    model, stopped_at = finish(carry)
    return model, {"loss": losses, "held": held, "stopped_at": stopped_at}


def train(models: eqx.Module, keys: jax.Array, x: jax.Array, y: jax.Array,
          x_stop: jax.Array, y_stop: jax.Array, schedule: Schedule,
          progress: Path | None = None, piece: int = 0, save_every: float = 60.0
          ) -> tuple[eqx.Module, dict[str, Any]]:
    """Every stacked model trained on ``(x, y)`` with its own key: ``(models, log)``, the
    log's entries stacked per model (``loss``: ``(count, steps)``). Without ``progress``, in
    one compiled call. With ``progress`` (a file) the steps run ``piece`` at a time (default
    ``schedule.every``, else the whole run) and the training state and log so far are saved
    there at most every ``save_every`` seconds (and ``seconds``, the training time spent, in
    its header); a rerun continues from the file: the same steps from the same state, so the
    same numbers as one call (a test checks it). The log then also holds ``seconds_before``,
    the seconds spent before this call."""
    if progress is None:
        return _train_whole(models, keys, x, y, x_stop, y_stop, schedule)
    piece = piece or schedule.every or schedule.steps
    params, static = eqx.partition(models, eqx.is_array)
    if not all(eqx.is_inexact_array(leaf) for leaf in jax.tree.leaves(params)):
        # the pieces carry the floating arrays alone (``_parts``'s carry), as an MLP's are
        raise ValueError("train(progress=...) takes models whose arrays are all floating")
    carry = _start(params, static, x, y, x_stop, y_stop, schedule)
    step_keys = jax.vmap(lambda k: _inputs(k, schedule)[1])(keys)
    # the state and the log so far, the log's length (``done`` steps) read from the header
    done = checkpoint.read_info(progress)["done"] if Path(progress).exists() else 0
    empty = np.zeros((len(keys), done), np.float32)
    saved = checkpoint.resume(progress, (carry, empty, empty), steps=schedule.steps,
                              piece=piece)
    losses, held, before = [], [], 0.0
    if saved is not None:
        (carry, loss, held_loss), info = saved
        losses, held, before = [np.asarray(loss)], [np.asarray(held_loss)], info["seconds"]
    begin = last = time.perf_counter()
    while done < schedule.steps:
        stop = min(done + piece, schedule.steps)
        carry, (loss, held_loss) = _advance(carry, static, jnp.asarray(done), stop - done,
                                            step_keys, x, y, x_stop, y_stop, schedule)
        losses.append(np.asarray(loss))
        held.append(np.asarray(held_loss))
        done = stop
        if done < schedule.steps and time.perf_counter() - last >= save_every:
            checkpoint.save(progress, (carry, np.concatenate(losses, 1),
                                       np.concatenate(held, 1)),
                            steps=schedule.steps, piece=piece, done=done,
                            seconds=before + time.perf_counter() - begin)
            last = time.perf_counter()
    models, stopped_at = _finish(carry, static, x, y, x_stop, y_stop, schedule)
    return models, {"loss": np.concatenate(losses, 1), "held": np.concatenate(held, 1),
                    "stopped_at": stopped_at, "seconds_before": before}


@eqx.filter_jit
def _train_whole(models, keys, x, y, x_stop, y_stop, schedule):
    params, static = eqx.partition(models, eqx.is_array)

    def one(p, key):
        model, log = train_one(eqx.combine(p, static), key, x, y, x_stop, y_stop, schedule)
        return eqx.filter(model, eqx.is_array), log

    params, log = jax.vmap(one)(params, keys)
    return eqx.combine(params, static), log


@eqx.filter_jit
def _start(params, static, x, y, x_stop, y_stop, schedule):
    return jax.vmap(lambda p: _parts(eqx.combine(p, static), x, y, x_stop, y_stop,
                                     schedule)[0])(params)


@eqx.filter_jit
def _advance(carry, static, start, count, step_keys, x, y, x_stop, y_stop, schedule):
    """Steps ``start ... start + count - 1`` (``start`` traced, so every piece of one length
    shares a program) from ``carry``."""
    def one(c, keys):
        # the step reads only the model's static part from the model _parts is given
        _, step, _ = _parts(eqx.combine(c[0], static), x, y, x_stop, y_stop, schedule)
        return jax.lax.scan(step, c, (start + jnp.arange(count),
                                      jax.lax.dynamic_slice_in_dim(keys, start, count)))
    return jax.vmap(one)(carry, step_keys)


@eqx.filter_jit
def _finish(carry, static, x, y, x_stop, y_stop, schedule):
    def one(c):
        model, stopped_at = _parts(eqx.combine(c[0], static), x, y, x_stop, y_stop,
                                   schedule)[2](c)
        return eqx.filter(model, eqx.is_array), stopped_at
    params, stopped_at = jax.vmap(one)(carry)
    return eqx.combine(params, static), stopped_at


@eqx.filter_jit
def predict(models: eqx.Module, x: jax.Array) -> jax.Array:
    """``(count, n)``: every model's prediction for every row of ``x``."""
    return eqx.filter_vmap(lambda m: jax.vmap(m)(x)[:, 0])(models)
