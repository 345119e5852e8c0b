"""Sequence-parallel training of a ``Transformer``: every device holds the whole model and a
chunk of every sequence.

``sequence_mesh(devices, data=1)`` lays the devices out as a ``data x seq`` grid.
``make_step(optimizer, mesh, attention)`` is one optax step on a batch of token sequences
``(B, L)`` with per-position targets (-1: no loss):

- ``mesh=None``: the one-device program, ``full_attention`` over whole sequences;
- otherwise the step runs inside ``jax.shard_map``: the batch is split over ``"data"`` and
  each sequence over ``"seq"``; the model and the optimizer state are replicated;
  embeddings, LayerNorms, MLPs and the read-out are token-wise and run on the local chunk,
  and attention is ``attention`` (``"rsa"``: Ring Self-Attention, ``"ring"``: blockwise ring
  attention, ``"local"``: attention within the chunk only, the ablation that cannot see
  other devices' tokens).

The loss is the mean cross-entropy over all positions with a target, across all devices:
each device sums its own and ``lax.psum`` adds the sums. The gradient is JAX's autodiff of
that global mean. The model is replicated (device-invariant) while the activations differ
per device, and the transpose of that broadcast is a sum over devices, so each device ends
with the full gradient and applies the same update: there is no division by the number of
devices to make.

``make_train(step, task, batch_size)`` runs ``steps`` steps inside one jit (``lax.scan``),
sampling each batch from the step's key, and returns the per-step loss and accuracy.
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from lab.data import retrieval
from lab.models.transformer import Transformer, full_attention
from lab.parallel import first_devices
from lab.parallel.ring import ring_attention, ring_self_attention

AXES = ("data", "seq")
ATTENTIONS = {"rsa": ring_self_attention("seq"), "ring": ring_attention("seq"),
              "local": full_attention}


class Metrics(NamedTuple):
    loss: jax.Array  # mean cross-entropy over the positions with a target
    accuracy: jax.Array  # fraction of those positions where the arg-max is the target


def sequence_mesh(devices: int, data: int = 1, platform: str | None = None) -> Mesh:
    """The first ``devices`` devices (of ``platform``: the default backend's if None) as a
    ``(data, devices // data)`` grid over ``("data", "seq")``; a one-line ValueError when
    they do not exist or do not divide."""
    chosen = first_devices(devices, platform)
    if data < 1 or devices % data:
        raise ValueError(f"the data axis ({data}) must divide the {devices} devices")
    return jax.make_mesh((data, devices // data), AXES, devices=chosen,
                         axis_types=(AxisType.Auto, AxisType.Auto))


def check_length(length: int, mesh: Mesh | None) -> None:
    """A one-line ValueError when sequences of ``length`` do not cut into equal chunks."""
    n = 1 if mesh is None else mesh.shape["seq"]
    if length % n:
        raise ValueError(f"sequence length {length} does not divide over {n} sequence "
                         f"devices; use a multiple of {n}")


def token_sums(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, ...]:
    """Sums over positions with a target (``targets >= 0``) of the cross-entropy, the count
    of such positions and of correct arg-maxes: ``logits (..., classes)``, ``targets (...)``."""
    counted = targets >= 0
    safe = jnp.where(counted, targets, 0)
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, safe)
    correct = (logits.argmax(-1) == safe) & counted
    return (jnp.sum(jnp.where(counted, xent, 0.0)), jnp.sum(counted),
            jnp.sum(correct))


def make_step(optimizer: optax.GradientTransformation, mesh: Mesh | None = None,
              attention: str = "rsa") -> Callable:
    """``step(model, opt_state, tokens, targets) -> (model, opt_state, Metrics)``, jitted;
    see the module docstring."""
    return eqx.filter_jit(step_function(optimizer, mesh, attention))


def step_function(optimizer: optax.GradientTransformation, mesh: Mesh | None = None,
                  attention: str = "rsa") -> Callable:
    """``make_step``'s function before ``jit``, to compile with chosen input shardings."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; choose one of "
                         f"{', '.join(ATTENTIONS)}")
    attend = full_attention if mesh is None else ATTENTIONS[attention]
    axes = () if mesh is None else AXES
    total = (lambda x: x) if mesh is None else (lambda x: lax.psum(x, axes))

    def local_step(model, opt_state, tokens, targets):
        chunk = tokens.shape[1]
        start = 0 if mesh is None else lax.axis_index("seq") * chunk
        positions = start + jnp.arange(chunk)

        def loss_fn(model):
            logits = jax.vmap(lambda t: model(t, positions, attend))(tokens)
            xent, count, correct = (total(x) for x in token_sums(logits, targets))
            return xent / count, correct / count

        (loss, accuracy), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(model)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, Metrics(loss, accuracy)

    if mesh is None:
        return local_step
    return jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P(), P(*AXES), P(*AXES)),
                         out_specs=(P(), P(), P()))


def make_train(step: Callable, task: retrieval.Retrieval, batch_size: int) -> Callable:
    """``train(model, opt_state, key, steps) -> (model, opt_state, Metrics per step)``: the
    batches of step ``t`` come from ``fold_in(key, t)``, the same whatever the mesh."""

    @eqx.filter_jit
    def train(model, opt_state, key, first, steps: int):
        def body(carry, t):
            model, opt_state = carry
            tokens, targets = retrieval.batch(task, jax.random.fold_in(key, t), batch_size)
            model, opt_state, metrics = step(model, opt_state, tokens, targets)
            return (model, opt_state), metrics

        (model, opt_state), metrics = lax.scan(body, (model, opt_state),
                                               first + jnp.arange(steps))
        return model, opt_state, metrics

    return lambda model, opt_state, key, steps, first=0: train(
        model, opt_state, key, jnp.asarray(first), steps)


def init(task: retrieval.Retrieval, optimizer: optax.GradientTransformation, *, hidden: int,
         heads: int, layers: int, causal: bool = False, key: jax.Array):
    """A ``Transformer`` for ``task`` and its optimizer state."""
    model = Transformer(task.vocab, task.values, hidden, heads, layers, task.length,
                        causal=causal, key=key)
    return model, optimizer.init(eqx.filter(model, eqx.is_array))
