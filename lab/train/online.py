"""Online learning baselines: one example at a time, predict first, then update.

``make_online_learner(inputs, classes, hidden, optimizer_name)`` returns
``run(xs, ys, key, lr) -> logits (T, classes)``: an MLP (linear when ``hidden`` is 0)
that predicts ``x_t``, then takes one optimizer step on ``(x_t, y_t)``. The step size is an
argument so that a grid of them is one ``vmap``. This is the stream VS-ML learns from, so
the online losses compare like with like.
"""

import functools

import equinox as eqx
import jax
import optax

from lab.models.feedforward import mlp

OPTIMIZERS = {"sgd": optax.sgd, "adam": optax.adam}


@functools.cache  # one function per configuration, so jit compiles it once
def make_online_learner(inputs: int, classes: int, hidden: int, optimizer_name: str):
    if optimizer_name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer_name!r}; choose one of "
                         f"{', '.join(OPTIMIZERS)}")
    sizes = [inputs, hidden, classes] if hidden else [inputs, classes]

    def run(xs: jax.Array, ys: jax.Array, key: jax.Array, lr) -> jax.Array:
        model = mlp(sizes, key=key)
        params, static = eqx.partition(model, eqx.is_array)
        optimizer = OPTIMIZERS[optimizer_name](lr)

        def loss(params, x, y):
            logits = eqx.combine(params, static)(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y), logits

        def step(carry, example):
            params, opt_state = carry
            (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params, *example)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), logits

        _, logits = jax.lax.scan(step, (params, optimizer.init(params)), (xs, ys))
        return logits

    return run
