"""Training and sampling the PixelCNNs of ``lab.models.pixelcnn``.

- ``nll``: the mean negative log-likelihood in nats per image of a batch (the loss of both
  models: each is an exact likelihood, so the numbers compare directly); ``bits_per_dim``
  converts it.
- ``make_train``: whole chunks of training steps inside one jit (``lax.scan``), vmapped over
  seeds; the data are an argument, not a closed-over constant.
- ``sample_sequential``: the PixelCNN's ancestral sampler, one full network evaluation per
  pixel in raster order (``lax.fori_loop``; ``start``/``stop`` run part of it, for the live
  panel and for timing a fraction of a large image). It counts the evaluations it makes.
- ``sample_windowed``: the same sampler evaluating the network only on the rows a pixel can
  see (its receptive field): the same samples, far less work per step at large sizes.
- ``sample_multiscale``: the multiscale sampler: the base image with ``sample_sequential``,
  then per doubling one evaluation per group (and, in the shallow variant, one shallow
  evaluation per pixel of the group). It counts both kinds and can return every stage.
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from lab.models.pixelcnn import (
    GROUPS,
    GatedPixelCNN,
    MultiscalePixelCNN,
    group_inputs,
    sample_pixels,
)


def nll(model: eqx.Module, x: jax.Array) -> jax.Array:
    """Mean ``-log p(x)`` in nats per image over a batch ``x`` ``(B, H, W)``."""
    return -jnp.mean(jax.vmap(model.log_prob)(x))


def bits_per_dim(nats_per_image: float, pixels: int) -> float:
    return nats_per_image / (pixels * np.log(2.0))


class TrainState(NamedTuple):
    model: eqx.Module
    opt_state: optax.OptState


def make_train(optimizer: optax.GradientTransformation, batch: int, chunk: int
               ) -> tuple[Callable, Callable, Callable]:
    """``start(models) -> state``, ``run(state, data, keys) -> (state, losses)`` (``chunk``
    steps per call, ``losses`` ``(seeds, chunk)``) and ``measure(state, x) -> nats``
    ``(seeds,)``; ``models`` are stacked over seeds (leading axis) and ``data`` ``(N, H, W)``
    integer images shared by every seed. ``run(state, data, keys, at, count)`` runs steps
    ``at ... at + count - 1`` of the chunk alone (the same minibatches: the same numbers as
    the whole chunk, a piece at a time)."""

    def step(state: TrainState, x: jax.Array) -> tuple[TrainState, jax.Array]:
        params, static = eqx.partition(state.model, eqx.is_inexact_array)
        loss, grads = jax.value_and_grad(lambda p: nll(eqx.combine(p, static), x))(params)
        updates, opt_state = optimizer.update(grads, state.opt_state, params)
        return TrainState(eqx.combine(optax.apply_updates(params, updates), static),
                          opt_state), loss

    def steps(state: TrainState, data: jax.Array, keys: jax.Array):
        def body(state, key):
            index = jax.random.randint(key, (batch,), 0, data.shape[0])
            return step(state, data[index])
        return jax.lax.scan(body, state, keys)

    def one_seed(state: TrainState, data: jax.Array, key: jax.Array):
        return steps(state, data, jax.random.split(key, chunk))

    def piece_one_seed(state: TrainState, data: jax.Array, key: jax.Array, at, count: int):
        keys = jax.lax.dynamic_slice_in_dim(jax.random.split(key, chunk), at, count)
        return steps(state, data, keys)

    def start(models: eqx.Module) -> TrainState:
        init = eqx.filter_vmap(lambda m: optimizer.init(eqx.filter(m, eqx.is_inexact_array)))
        return TrainState(models, init(models))

    whole = eqx.filter_jit(eqx.filter_vmap(one_seed, in_axes=(0, None, 0)))
    # ``at`` traced, so the pieces of one length share a program
    piece = eqx.filter_jit(eqx.filter_vmap(piece_one_seed, in_axes=(0, None, 0, None, None)))

    def run(state: TrainState, data: jax.Array, keys: jax.Array, at: int | None = None,
            count: int | None = None) -> tuple[TrainState, jax.Array]:
        if at is None:
            return whole(state, data, keys)
        return piece(state, data, keys, jnp.asarray(at, jnp.int32), count)

    measure = eqx.filter_jit(eqx.filter_vmap(lambda s, x: nll(s.model, x), in_axes=(0, None)))
    return start, run, measure


# sampling ------------------------------------------------------------------------------------

def sample_sequential(model: GatedPixelCNN, key: jax.Array, canvas: jax.Array,
                      start: int | jax.Array = 0, stop: int | jax.Array | None = None,
                      cond: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Pixels ``start ... stop - 1`` (raster order) of ``canvas`` ``(H, W)`` drawn one at a
    time, each from a full evaluation of ``model`` on the canvas so far: ``(canvas,
    evaluations)``. Pixel ``t`` uses ``fold_in(key, t)``, so a sample does not depend on how
    it is cut into calls."""
    height, width = canvas.shape
    stop = height * width if stop is None else stop

    def body(t, carry):
        canvas, count = carry
        i, j = t // width, t % width
        logits = model(canvas, cond)[i, j]
        pixel = sample_pixels(jax.random.fold_in(key, t), logits, model.levels)
        return canvas.at[i, j].set(pixel), count + 1

    return jax.lax.fori_loop(start, stop, body, (canvas.astype(jnp.int32), jnp.int32(0)))


def receptive_rows(model: GatedPixelCNN) -> int:
    """How many rows above a pixel its logits can depend on: each layer's vertical kernel
    reaches ``rows - 1`` rows up (``first_kernel // 2``, then ``kernel // 2`` per layer), and
    the shift from the vertical into the horizontal stack one more."""
    return sum(layer.vertical.shape[0] - 1 for layer in model.layers) + 1


def sample_windowed(model: GatedPixelCNN, key: jax.Array, canvas: jax.Array,
                    start: int | jax.Array = 0, stop: int | jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array]:
    """``sample_sequential`` with each evaluation on the ``receptive_rows + 1`` rows that end
    at the pixel's row instead of the whole canvas: the same logits (rows below a pixel and
    rows beyond its receptive field never reach it; at the top the crop starts at row 0,
    whose zero padding is the canvas's own), so the same sample for the same key, at
    ``window / height`` of the cost per step. Still one evaluation per pixel: it plays the
    part of the cached sampler (the caching of Ramachandran et al. 2017 keeps activations
    instead of recomputing the window)."""
    height, width = canvas.shape
    window = min(height, receptive_rows(model) + 1)
    stop = height * width if stop is None else stop

    def body(t, carry):
        canvas, count = carry
        i, j = t // width, t % width
        top = jnp.clip(i - window + 1, 0, height - window)
        crop = jax.lax.dynamic_slice(canvas, (top, 0), (window, width))
        logits = model(crop)[i - top, j]
        pixel = sample_pixels(jax.random.fold_in(key, t), logits, model.levels)
        return canvas.at[i, j].set(pixel), count + 1

    return jax.lax.fori_loop(start, stop, body, (canvas.astype(jnp.int32), jnp.int32(0)))


class Sample(NamedTuple):
    image: jax.Array  # (size, size)
    deep: jax.Array  # network evaluations of the base PixelCNN and the group networks
    shallow: jax.Array  # evaluations of the shallow within-group PixelCNNs
    stages: tuple  # the image after the base and after each group (coarse to fine)


def sample_group(model: MultiscalePixelCNN, fine: jax.Array, scale: int, group: int,
                 key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Group ``group`` of doubling ``scale`` drawn into ``fine`` ``(2K, 2K)`` (its coarse image
    and earlier groups already there): one group-network evaluation, all the group's pixels
    at once, or (shallow) one shallow evaluation per pixel of the group. ``(fine, shallow
    evaluations)``."""
    r, c = GROUPS[group]
    features = model.groups[scale][group](group_inputs(fine, group, model.levels))[r::2, c::2]
    if model.shallow_models is None:
        pixels, count = sample_pixels(key, features, model.levels), jnp.int32(0)
    else:
        pixels, count = sample_sequential(model.shallow_models[scale][group], key,
                                          jnp.zeros(features.shape[:2], jnp.int32),
                                          cond=features)
    return fine.at[r::2, c::2].set(pixels), count


def stage_keys(key: jax.Array) -> tuple[jax.Array, Callable[[int, int], jax.Array]]:
    """The base image's key and ``(scale, group) -> key`` (shared by the sampler and the
    panel, which runs the same stages one call at a time)."""
    k_base, k_groups = jax.random.split(key)
    return k_base, lambda scale, group: jax.random.fold_in(k_groups, 3 * scale + group)


def sample_multiscale(model: MultiscalePixelCNN, key: jax.Array) -> Sample:
    """One image from the multiscale model: the ``base x base`` image pixel by pixel
    (``sample_sequential``), then per doubling each group with ``sample_group``. Counts the
    deep evaluations (base pixels + one per group) and the shallow ones."""
    k_base, group_key = stage_keys(key)
    image, deep = sample_sequential(model.base_model, k_base,
                                    jnp.zeros((model.base, model.base), jnp.int32))
    shallow = jnp.int32(0)
    stages = [image]
    for s in range(model.scales):
        size = image.shape[0] * 2
        fine = jnp.zeros((size, size), jnp.int32).at[::2, ::2].set(image)
        for g in range(len(GROUPS)):
            fine, count = sample_group(model, fine, s, g, group_key(s, g))
            deep, shallow = deep + 1, shallow + count
            stages.append(fine)
        image = fine
    return Sample(image, deep, shallow, tuple(stages))
