"""Global, local and n-wise interlocking training of a network cut into components.

Gomez, Key, Perlin, Gou, Frosst, Dean, Gal, "Interlocking Backpropagation: Improving
depthwise model-parallelism" (arXiv 2010.04116). A ``lab.models.interlocking.Stack`` has
components ``f_1 ... f_K`` and heads ``a_1 ... a_{K-1}``; write ``L_t`` for head ``t``'s
loss on ``h_t`` (``t < K``) and ``L_K`` for the true loss on the prediction ``h_K``.

**One rule, ``nwise(n)``.** Component ``k`` is trained on the loss ``n - 1`` components
ahead, ``L_{t(k)}`` with ``t(k) = min(k + n - 1, K)``, backpropagated through ``f_{t(k)},
..., f_{k+1}`` at their current parameters into ``f_k``, with ``f_k``'s input detached:

- ``n = 1`` is **local** learning: each component on its own head's loss, the last on the
  true loss;
- ``n = 2`` is **pairwise** interlocking: component ``k`` on head ``k + 1``'s loss through
  ``f_{k+1}`` (the last two components on the true loss);
- ``n = K`` is **global** learning (end-to-end backpropagation of the true loss): every
  component's target is ``L_K``, and the gradients are exactly ``jax.grad`` of ``L_K``.

Each head whose loss some component uses is trained on its own loss with its input
detached (``a_t`` never sends gradients into ``f_t``); heads no component uses (head 1 under
pairwise, every head under global) are left as they are. This is the official code's
routing ("pairwise only", ``NwiseComponent`` with communication distance ``n - 1``) for
``n >= 2``: its tests are ``tests/test_interlocking.py``'s hand-computed cases. One
difference: the official n-wise component also backpropagates losses that no component
behind it uses (a head's loss at distance ``n - 1`` past the first component); here only the
messages some component consumes are computed (the parameters' updates are the same).

**Modes** (``MODES``; a rule's name ends in ``-sum`` or ``-mean`` to pick one, e.g.
``"pairwise-sum"``): how a component combines its target's gradient with its own head's.

- ``"only"`` (the default, and the rule names without a suffix): the target's gradient
  alone, as above. The official code's ``PairwiseComponent`` and ``NwiseComponent``
  ("pairwise only"), the only pairwise mode its released version implements.
- ``"sum"``: component ``k`` also uses its own loss ``L_k`` (its head's, input detached):
  its gradient is ``dL_{t(k)}/dtheta_k + dL_k/dtheta_k``. The official repository's
  ``pairwise_grad_mode="sum"``, kept there only as the skipped test
  ``test__pairwise_sum__backward_pass__main_net_parameters_updated_correctly``
  (``tests/test_model.py``), whose hand-computed case ``tests/test_interlocking.py`` checks.
- ``"mean"``: the mean of the two, ``(dL_{t(k)}/dtheta_k + dL_k/dtheta_k) / 2``: the
  official ``pairwise_grad_mode="mean"`` (its skipped test ``test__pairwise_mean__...``).

Where a component's target is its own loss (the last component; every component under
local learning) it has one gradient and the modes agree. Under ``sum`` and ``mean`` every
head is used. The official code defines the two modes for pairwise only; here they apply to
any ``n`` in the same way (own loss plus the loss ``n - 1`` components ahead).

How: a forward pass records each component's VJP at its (detached) input; for each target
loss the cotangent of ``h_t`` is pulled back through ``f_t, f_{t-1}, ...`` down to the
components that use it, keeping each one's parameter cotangent where loss ``t`` trains it
(``trained_on``), then ``combine`` sums or averages a component's parts. Under ``jit`` XLA
drops every cotangent no one reads, so local learning does one backward pass per component
and ``n``-wise up to ``n``.

A loss is a pure function ``loss(logits, labels) -> scalar`` of the batch (``logits`` from
``jax.vmap`` of a component or head); ``head_loss`` (default: ``loss``) is the heads'.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lab.models.interlocking import Stack

# The rule (which losses train which component) lives in lab.models, below lab.parallel's
# schedule and pipeline, which use it too; it stays this module's API (train.parse_rule, ...).
from lab.models.interlocking_rule import (  # noqa: F401 (re-exported)
    MODES,
    RULES,
    Loss,
    check_mode,
    check_n,
    combine,
    head_gradients,
    parse_rule,
    rule_n,
    targets,
    trained_on,
)
from lab.train import checkpoint


def check_structure(stack: Stack, n: int, mode: str = "only") -> None:
    """One-line ValueErrors for ``n`` outside ``1 ... K``, an unknown mode, one component,
    or a number of heads other than ``K - 1`` (``gradients`` checks this while tracing,
    before compiling)."""
    k = len(stack.components)
    check_n(k, n)
    check_mode(mode)
    if len(stack.heads) != k - 1:
        raise ValueError(f"{len(stack.heads)} heads do not match {k} components; give one "
                         f"head per component but the last ({k - 1})")


def check(stack: Stack, example: jax.Array, n: int, mode: str = "only") -> None:
    """One-line ValueErrors for a stack that cannot be trained with ``n`` and ``mode``, from
    shapes only (``jax.eval_shape``: nothing is compiled)."""
    check_structure(stack, n, mode)
    h = jax.ShapeDtypeStruct(jnp.shape(example), jnp.asarray(example).dtype)
    for i, (component, head) in enumerate(zip(stack.components, stack.heads, strict=False)):
        try:
            h = jax.eval_shape(component, h)
        except Exception as error:  # noqa: BLE001 (re-raised as one line)
            raise ValueError(f"component {i + 1} does not take the output of component {i} "
                             f"({h.shape}): {str(error).splitlines()[0]}") from None
        try:
            jax.eval_shape(head, h)
        except Exception as error:  # noqa: BLE001
            raise ValueError(f"head {i + 1} does not take component {i + 1}'s output "
                             f"{h.shape}: {str(error).splitlines()[0]}") from None


class Metrics(NamedTuple):
    loss: jax.Array  # the true loss L_K of the batch
    head_losses: jax.Array  # (K - 1,) each used head's loss; nan where no one uses it


def gradients(stack: Stack, x: jax.Array, y: jax.Array, n: int, loss: Loss,
              head_loss: Loss | None = None, mode: str = "only") -> tuple[Stack, Metrics]:
    """The n-wise gradients (in ``mode``) of every parameter of ``stack`` on the batch
    ``(x, y)`` (see the module docstring), as a pytree shaped like
    ``eqx.filter(stack, eqx.is_inexact_array)``."""
    check_structure(stack, n, mode)
    head_loss = loss if head_loss is None else head_loss
    count = len(stack.components)
    users: dict[int, list[int]] = {}  # loss -> the components it trains
    for k, losses in enumerate(trained_on(count, n, mode)):
        for t in losses:
            users.setdefault(t, []).append(k)

    vjps, h = [], x
    for component in stack.components:
        h, vjp = eqx.filter_vjp(lambda f, v: jax.vmap(f)(v), component, jax.lax.stop_gradient(h))
        vjps.append((h, vjp))

    # each used loss's value, its cotangent on h_t, and its head's gradient (input detached)
    cotangent, head_grads, head_values = {}, {}, jnp.full(count - 1, jnp.nan)
    for t in sorted(users):
        h_t = vjps[t][0]
        if t == count - 1:  # the true loss: every rule trains the last component on it
            true_loss, cotangent[t] = jax.value_and_grad(loss)(h_t, y)
        else:
            value, head_grads[t], cotangent[t] = head_gradients(head_loss, stack.heads[t], h_t, y)
            head_values = head_values.at[t].set(value)

    parts: list[list] = [[] for _ in range(count)]  # each component's, nearest loss first
    for t in sorted(users):
        c = cotangent[t]
        for k in range(t, min(users[t]) - 1, -1):
            d_params, d_input = vjps[k][1](c)
            if k in users[t]:
                parts[k].append(d_params)
            c = d_input
    params = eqx.filter(stack, eqx.is_inexact_array)
    heads = [head_grads[t] if t in head_grads else jax.tree.map(jnp.zeros_like, p)
             for t, p in enumerate(params.heads)]
    return Stack([combine(p, mode) for p in parts], heads), Metrics(true_loss, head_values)


def make_step(optimizer: optax.GradientTransformation, n: int, loss: Loss,
              head_loss: Loss | None = None, mode: str = "only"):
    """``step(stack, opt_state, x, y) -> (stack, opt_state, metrics)``: one jitted n-wise
    step (in ``mode``) with one optax optimizer over every component and head.
    ``opt_state`` is ``optimizer.init(eqx.filter(stack, eqx.is_inexact_array))``."""
    check_mode(mode)

    @eqx.filter_jit
    def step(stack, opt_state, x, y):
        grads, metrics = gradients(stack, x, y, n, loss, head_loss, mode)
        params = eqx.filter(stack, eqx.is_inexact_array)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return eqx.apply_updates(stack, updates), opt_state, metrics

    return step


class Run(NamedTuple):
    """What ``make_train``'s ``train`` returns; arrays lead with the seeds."""

    train_loss: np.ndarray  # (seeds, evaluations) mean true loss of the steps before each
    evaluation: dict  # name -> (seeds, evaluations) what ``evaluate`` returned
    params: Any  # the trained parameters (``eqx.filter``'s structure), leading axis seeds


def make_train(init: Callable[[jax.Array], Stack],
               sample: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]],
               evaluate: Callable[[Any, Stack], dict], n: int,
               optimizer: optax.GradientTransformation, loss: Loss,
               head_loss: Loss | None, eval_every: int, mode: str = "only"):
    """``(train, start, chunk, measure)`` for rule ``n`` in ``mode``, each over a batch of
    seeds:

    - ``start(keys) -> state``: parameters and optimizer states (``state = (params,
      opt_state)``, leading axis the seeds), built eagerly;
    - ``chunk(data, state, keys) -> (state, mean loss)``: ``eval_every`` steps on
      ``sample(data, key)`` batches in one ``lax.scan``, in one jit, vmapped over seeds;
    - ``measure(data, state) -> evaluate(data, stack)`` per seed, jitted;
    - ``train(data, keys, steps, progress=None) -> Run``: ``start``, then ``chunk`` and
      ``measure`` until ``steps``; with ``progress`` (a file) the state, losses and
      evaluations so far (and ``seconds`` spent, in its header) are saved there after every
      chunk and a rerun continues from them: the same chunks from the same state, so the
      same numbers. The chunks are looped in Python: a scan of chunks nests two loops in one
      program, which XLA's CPU compiler took 3x longer to compile (21 s against 7 s + 3 s
      for the ResNet) for no faster run.

    ``data`` is a pytree of arrays passed in, never closed over (a closed-over data set is
    compiled into the program as a constant)."""
    check_mode(mode)
    static = eqx.partition(init(jax.random.key(0)), eqx.is_inexact_array)[1]

    def start_one(key):
        params = eqx.filter(init(key), eqx.is_inexact_array)
        return params, optimizer.init(params)

    def chunk_one(data, state, key):
        def one(carry, key):
            params, opt_state = carry
            x, y = sample(data, key)
            grads, metrics = gradients(eqx.combine(params, static), x, y, n, loss, head_loss,
                                       mode)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (eqx.apply_updates(params, updates), opt_state), metrics.loss

        state, losses = jax.lax.scan(one, state, jax.random.split(key, eval_every))
        return state, losses.mean()

    def start(keys):  # built seed by seed, eagerly: jitting the initialisers compiles
        # hundreds of random-number ops (13 s for the ResNet) to run them once
        states = [start_one(key) for key in keys]
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)

    chunk = jax.jit(jax.vmap(chunk_one, in_axes=(None, 0, 0)))
    measure = jax.jit(jax.vmap(lambda data, params: evaluate(data, eqx.combine(params, static)),
                               in_axes=(None, 0)))

    def train(data, keys, steps: int, progress: Path | None = None) -> Run:
        if steps < eval_every or steps % eval_every:
            raise ValueError(f"steps {steps} must be a positive multiple of eval_every "
                             f"{eval_every}")
        init_keys, data_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
        state, losses, evaluations = start(init_keys), [], []
        saved = None if progress is None else checkpoint.resume(progress, state)
        spent, begin = 0.0, time.perf_counter()
        if saved is not None:
            state, info = saved
            losses, evaluations = checkpoint.from_json([info["losses"], info["evaluations"]])
            spent = info["seconds"]
        for i in range(len(losses), steps // eval_every):
            state, mean_loss = chunk(data, state, jax.vmap(jax.random.fold_in, (0, None))(
                data_keys, i))
            losses.append(mean_loss)
            evaluations.append(measure(data, state[0]))
            if progress is not None:
                checkpoint.save(progress, state, losses=checkpoint.to_json(losses),
                                evaluations=checkpoint.to_json(evaluations),
                                seconds=spent + time.perf_counter() - begin)
        evaluation = {k: np.stack([np.asarray(e[k]) for e in evaluations], 1)
                      for k in evaluations[0]}
        return Run(np.stack([np.asarray(x) for x in losses], 1), evaluation, state[0])

    return train, start, chunk, measure


class Selection(NamedTuple):
    """What ``select_step_size`` returns."""

    grid: tuple[float, ...]  # the step sizes tried
    metric: np.ndarray  # (len(grid), seeds) the held-out metric after the steps
    best: float  # the step size of the lowest finite mean metric


def select_step_size(init: Callable[[jax.Array], Stack],
                     sample: Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]],
                     evaluate: Callable[[Any, Stack], dict], metric: str, n: int,
                     grid: tuple[float, ...], steps: int, data, keys: jax.Array, loss: Loss,
                     head_loss: Loss | None = None, mode: str = "only",
                     optimizer: Callable[..., optax.GradientTransformation] = optax.adam
                     ) -> Selection:
    """Rule ``n`` (in ``mode``) trained ``steps`` steps from each seed of ``keys`` at each
    step size of ``grid`` (``optimizer(learning_rate)``, Adam by default), then
    ``evaluate(data, stack)[metric]`` (lower is better, e.g. held-out bits per character):
    the step size with the lowest mean over seeds is ``best``; a step size whose metric is
    not finite (diverged) is never chosen. ``data`` holds the selection's training text and
    its held-out split, apart from the test split a claim reports on.

    One compiled call for the whole grid: the step size is a value in the optimizer's state
    (``optax.inject_hyperparams``), so every (step size, seed) pair is one element of the
    ``jax.vmap``. Every step size starts from the same initialisations and sees the same
    batches (seed by seed)."""
    if len(grid) < 1 or steps < 1:
        raise ValueError(f"select_step_size needs a grid and steps >= 1, got {grid}, {steps}")
    opt = optax.inject_hyperparams(optimizer)(learning_rate=float(grid[0]))
    _, start, chunk, measure = make_train(init, sample, evaluate, n, opt, loss, head_loss, steps,
                                          mode)
    seeds = len(keys)
    init_keys, data_keys = jax.vmap(jax.random.split, out_axes=1)(
        jnp.concatenate([keys] * len(grid)))  # element i: step size i // seeds
    params, opt_state = start(init_keys)
    rates = jnp.repeat(jnp.asarray(grid, jnp.float32), seeds)
    opt_state = opt_state._replace(hyperparams=opt_state.hyperparams | {"learning_rate": rates})
    state, _ = chunk(data, (params, opt_state),
                     jax.vmap(jax.random.fold_in, (0, None))(data_keys, 0))
    values = np.asarray(measure(data, state[0])[metric], np.float64).reshape(len(grid), seeds)
    means = values.mean(axis=1)
    if not np.isfinite(means).any():
        raise ValueError(f"every step size of {list(grid)} diverged (a non-finite {metric}); "
                         "try smaller step sizes")
    best = float(grid[int(np.argmin(np.where(np.isfinite(means), means, np.inf)))])
    return Selection(tuple(float(g) for g in grid), values, best)


def global_(optimizer, components: int, loss: Loss):
    """End-to-end backpropagation: ``make_step(optimizer, components, loss)``."""
    return make_step(optimizer, components, loss)


def local(optimizer, loss: Loss, head_loss: Loss | None = None):
    """Each component on its own head (the last on the true loss): ``n = 1``."""
    return make_step(optimizer, 1, loss, head_loss)


def nwise(optimizer, n: int, loss: Loss, head_loss: Loss | None = None, mode: str = "only"):
    """Interlocking with reach ``n`` (pairwise: ``n = 2``) in ``mode`` (``MODES``)."""
    return make_step(optimizer, n, loss, head_loss, mode)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy over every leading position (images: the batch; the
    language model: the batch and the sequence), in nats."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
