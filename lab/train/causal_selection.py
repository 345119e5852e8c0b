"""The candidates of causal model selection: many small regression MLPs that differ only in
their seed (initialisation and minibatch order), trained together with ``jax.vmap`` inside
one jit.

    models = candidates(jax.random.key(0), count=100, inputs=5, hidden=32)
    models, losses = train(models, keys, x, y, steps=500, batch=64, lr=1e-2)
    predictions = predict(models, x)          # (count, n)

Each model maps one example's inputs ``(inputs,)`` to a scalar; the loss is the mean squared
error. ``train`` is pure: the same keys and data give the same models, whether the models
are trained together (vmapped) or one at a time (a test checks it).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from lab.models.feedforward import mlp


def candidates(key: jax.Array, count: int, inputs: int, hidden: int = 32) -> eqx.Module:
    """``count`` MLPs ``inputs -> hidden -> hidden -> 1`` (tanh), stacked on a leading axis."""
    if count < 1 or inputs < 1 or hidden < 1:
        raise ValueError(f"count, inputs and hidden must be at least 1, got {count}, "
                         f"{inputs}, {hidden}")
    make = lambda k: mlp([inputs, hidden, hidden, 1], activation=jnp.tanh, key=k)  # noqa: E731
    return eqx.filter_vmap(make)(jax.random.split(key, count))


def mse(model: eqx.Module, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x)[:, 0] - y) ** 2)


def train_one(model: eqx.Module, key: jax.Array, x: jax.Array, y: jax.Array, steps: int,
              batch: int, lr: float) -> tuple[eqx.Module, jax.Array]:
    """``steps`` Adam steps on minibatches of ``batch`` rows drawn with ``key``; returns the
    model and the loss per step (``lax.scan``)."""
    optimizer = optax.adam(lr)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def step(carry, key):
        params, state = carry
        rows = jax.random.randint(key, (batch,), 0, x.shape[0])
        loss, grads = jax.value_and_grad(
            lambda p: mse(eqx.combine(p, static), x[rows], y[rows]))(params)
        updates, state = optimizer.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), loss

    (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)),
                                       jax.random.split(key, steps))
    return eqx.combine(params, static), losses


@eqx.filter_jit
def train(models: eqx.Module, keys: jax.Array, x: jax.Array, y: jax.Array, steps: int,
          batch: int, lr: float) -> tuple[eqx.Module, jax.Array]:
    """Every stacked model trained on ``(x, y)`` with its own key, in one compiled call:
    ``(models, losses (count, steps))``."""
    params, static = eqx.partition(models, eqx.is_array)

    def one(p, key):
        model, losses = train_one(eqx.combine(p, static), key, x, y, steps, batch, lr)
        return eqx.filter(model, eqx.is_array), losses

    params, losses = jax.vmap(one)(params, keys)
    return eqx.combine(params, static), losses


@eqx.filter_jit
def predict(models: eqx.Module, x: jax.Array) -> jax.Array:
    """``(count, n)``: every model's prediction for every row of ``x``."""
    return eqx.filter_vmap(lambda m: jax.vmap(m)(x)[:, 0])(models)
