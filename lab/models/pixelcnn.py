"""PixelCNNs: a sequential gated PixelCNN and the parallel multiscale PixelCNN.

Images are ``(H, W)`` arrays of integer levels ``0 ... levels - 1`` (``levels`` 2: binary,
a Bernoulli per pixel; 256: 8-bit grey, a 256-way softmax). Every model takes ONE image
(batch with ``jax.vmap``) and gives its log-likelihood in nats with ``log_prob``.

- ``GatedPixelCNN`` (van den Oord, Kalchbrenner, Vinyals, Espeholt, Graves, Kavukcuoglu,
  "Conditional Image Generation with PixelCNN Decoders", 2016): a vertical stack (rows above)
  and a horizontal stack (the row so far), gated ``tanh(a) * sigmoid(b)`` units, the
  vertical stack fed into the horizontal one shifted down a row, residual connections on the
  horizontal stack. Mask A (the first layer: a pixel does not see itself) is a shift of the
  horizontal input one column to the right; mask B (later layers: a feature sees its own
  position's features) is the plain ``1 x (k//2 + 1)`` kernel. The order is raster order:
  pixel ``(i, j)`` is predicted from rows ``< i`` and row ``i``'s columns ``< j``. Sampling
  takes one network evaluation per pixel (``lab.train.pixelcnn.sample_sequential``).
- ``MultiscalePixelCNN`` (Reed, van den Oord, Kalchbrenner, Gomez Colmenarejo, Wang, Chen,
  Belov, de Freitas, "Parallel Multiscale Autoregressive Density Estimation", ICML 2017): a
  ``GatedPixelCNN`` models the ``base x base`` image ``x[::f, ::f]``; each doubling from
  ``K x K`` to ``2K x 2K`` tiles the finer image into 2x2 blocks whose upper-left pixels are
  the coarser image (group 1) and adds three groups, upper-right (2), lower-left (3) and
  lower-right (4), each predicted by its own network in one pass from the coarse image
  (upsampled), the groups before it and masks saying which pixels are known and which are
  wanted. The pixels of a group are conditionally independent given what came before, so
  sampling takes ``base**2 + 3 log2(size / base)`` network evaluations. With ``shallow``, a
  one-layer gated PixelCNN conditioned on the group network's features models the pixels
  inside each group in raster order (the paper's within-group variant): the deep networks
  still run once per group, the shallow one once per pixel of the group.

  The likelihood is exact: ``log p(x) = log p_base(x[::f, ::f]) + sum over doublings and
  groups of log p(group | coarser image, earlier groups)``, a product of conditionals over a
  fixed order of all ``size**2`` pixels.

**Deviations** (the paper's figures were not available here; its abstract and the issue's
description are what this follows): the grouping is the upper-left / upper-right /
lower-left / lower-right order within each 2x2 block with one network per group and
doubling (three deep passes per doubling); the group networks are plain residual
convolution stacks at the finer resolution, without the paper's conditioning inputs (text,
class, actions), and the model is unconditional.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.conv import conv2d
from lab.models.init import dense

GROUPS = ((0, 1), (1, 0), (1, 1))  # (row, column) in each 2x2 block of groups 2, 3, 4


def outputs(levels: int) -> int:
    """Logits per pixel: one Bernoulli logit for binary images, else one per level."""
    return 1 if levels == 2 else levels


def scaled(x: jax.Array, levels: int) -> jax.Array:
    """Integer levels as network input in [-1, 1]."""
    return 2.0 * x.astype(jnp.float32) / (levels - 1) - 1.0


def pixel_log_prob(logits: jax.Array, x: jax.Array, levels: int) -> jax.Array:
    """Per-pixel log-probability (nats) of levels ``x`` ``(...)`` under ``logits``
    ``(..., outputs(levels))``."""
    if levels == 2:
        return -jax.nn.softplus(-(2.0 * x - 1.0) * logits[..., 0])
    log_p = jax.nn.log_softmax(logits, -1)
    return jnp.take_along_axis(log_p, x[..., None].astype(jnp.int32), -1)[..., 0]


def sample_pixels(key: jax.Array, logits: jax.Array, levels: int) -> jax.Array:
    """Levels drawn from ``logits`` ``(..., outputs(levels))``, int32."""
    if levels == 2:
        return jax.random.bernoulli(key, jax.nn.sigmoid(logits[..., 0])).astype(jnp.int32)
    return jax.random.categorical(key, logits, -1).astype(jnp.int32)


def check_levels(x: jax.Array, levels: int) -> None:
    """A one-line error when images ``x`` hold levels a ``levels``-level model cannot model
    (checked on concrete arrays only)."""
    top, low = int(jnp.max(x)), int(jnp.min(x))
    if low < 0:
        raise ValueError(f"images hold levels down to {low}; levels must be 0 ... {levels - 1}")
    if top >= levels:
        raise ValueError(f"images hold levels up to {top} but the model was built for "
                         f"{levels} levels ({'binary' if levels == 2 else f'{levels}-level'}); "
                         f"build it with levels={top + 1 if top < 2 else 256} or binarise "
                         "the images")


def _shift_down(x: jax.Array) -> jax.Array:
    return jnp.pad(x, ((1, 0), (0, 0), (0, 0)))[:-1]


def _shift_right(x: jax.Array) -> jax.Array:
    return jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]


def _gate(a: jax.Array) -> jax.Array:
    tanh, sigmoid = jnp.split(a, 2, axis=-1)
    return jnp.tanh(tanh) * jax.nn.sigmoid(sigmoid)


class GatedLayer(eqx.Module):
    """One gated layer: ``(v, h, cond) -> (v', h')`` on ``(H, W, C)`` feature maps.

    ``v_pre = vertical(v)`` sees rows ``i - k//2 ... i``; ``h_pre = horizontal(h) +
    link(shift_down(v_pre)) (+ cond)`` sees row ``i``'s columns ``j - k//2 ... j`` and,
    through the shifted vertical stack, only rows above. ``v' = gate(v_pre)``, ``h' = h +
    out(gate(h_pre))`` (no residual in the first layer, whose input is the image)."""

    vertical: jax.Array  # (k//2 + 1, k, C_in, 2C)
    horizontal: jax.Array  # (1, k//2 + 1, C_in, 2C)
    link: jax.Array  # (2C, 2C)
    out: jax.Array  # (C, C)
    cond: jax.Array | None  # (C_cond, 2C)
    bias_v: jax.Array
    bias_h: jax.Array
    first: bool = eqx.field(static=True)

    def __init__(self, in_channels: int, channels: int, kernel: int, first: bool,
                 cond_channels: int = 0, *, key: jax.Array):
        k_v, k_h, k_link, k_out, k_cond = jax.random.split(key, 5)
        rows = kernel // 2 + 1
        self.vertical = dense(k_v, (rows, kernel, in_channels, 2 * channels),
                              rows * kernel * in_channels)
        self.horizontal = dense(k_h, (1, rows, in_channels, 2 * channels), rows * in_channels)
        self.link = dense(k_link, (2 * channels, 2 * channels), 2 * channels)
        self.out = dense(k_out, (channels, channels), channels)
        self.cond = (dense(k_cond, (cond_channels, 2 * channels), cond_channels)
                     if cond_channels else None)
        self.bias_v = jnp.zeros(2 * channels)
        self.bias_h = jnp.zeros(2 * channels)
        self.first = first

    def __call__(self, v: jax.Array, h: jax.Array, cond: jax.Array | None
                 ) -> tuple[jax.Array, jax.Array]:
        rows, kernel = self.vertical.shape[:2]
        half = kernel // 2
        v_pre = conv2d(jnp.pad(v, ((rows - 1, 0), (half, half), (0, 0))), self.vertical)
        v_pre = v_pre + self.bias_v
        h_in = _shift_right(h) if self.first else h  # mask A: the pixel itself is hidden
        h_pre = conv2d(jnp.pad(h_in, ((0, 0), (rows - 1, 0), (0, 0))), self.horizontal)
        h_pre = h_pre + _shift_down(v_pre) @ self.link + self.bias_h
        if self.cond is not None:
            extra = cond @ self.cond
            v_pre, h_pre = v_pre + extra, h_pre + extra
        h_out = _gate(h_pre) @ self.out
        return _gate(v_pre), h_out if self.first else h + h_out


class GatedPixelCNN(eqx.Module):
    """A gated PixelCNN over ``(H, W)`` images of ``levels`` levels, any size: ``layers``
    gated layers of ``channels`` (the first with a ``first_kernel`` kernel, then
    ``kernel``), then ReLU - 1x1 - ReLU - 1x1 to the logits. ``cond_channels`` > 0 adds a
    per-pixel conditioning map to every layer (the multiscale model's shallow variant)."""

    layers: list[GatedLayer]
    hidden: jax.Array
    head: jax.Array
    bias_hidden: jax.Array
    bias_head: jax.Array
    levels: int = eqx.field(static=True)

    def __init__(self, levels: int = 2, channels: int = 32, layers: int = 5,
                 first_kernel: int = 7, kernel: int = 3, cond_channels: int = 0, *,
                 key: jax.Array):
        keys = jax.random.split(key, layers + 2)
        self.layers = [GatedLayer(1 if i == 0 else channels, channels,
                                  first_kernel if i == 0 else kernel, i == 0, cond_channels,
                                  key=keys[i]) for i in range(layers)]
        self.hidden = dense(keys[-2], (channels, channels), channels)
        self.head = dense(keys[-1], (channels, outputs(levels)), channels) * 0.1
        self.bias_hidden = jnp.zeros(channels)
        self.bias_head = jnp.zeros(outputs(levels))
        self.levels = levels

    def __call__(self, x: jax.Array, cond: jax.Array | None = None) -> jax.Array:
        """Logits ``(H, W, outputs(levels))`` for image ``x`` ``(H, W)``: those at ``(i, j)``
        depend only on ``x`` at pixels before ``(i, j)`` in raster order."""
        v = h = scaled(x, self.levels)[..., None]
        for layer in self.layers:
            v, h = layer(v, h, cond)
        hidden = jax.nn.relu(jax.nn.relu(h) @ self.hidden + self.bias_hidden)
        return hidden @ self.head + self.bias_head

    def log_prob(self, x: jax.Array, cond: jax.Array | None = None) -> jax.Array:
        """``log p(x)`` in nats for one image."""
        return pixel_log_prob(self(x, cond), x, self.levels).sum()


def _same_conv(x: jax.Array, weight: jax.Array) -> jax.Array:
    half = weight.shape[0] // 2
    return conv2d(jnp.pad(x, ((half, half), (half, half), (0, 0))), weight)


class GroupNet(eqx.Module):
    """One group's network at the finer resolution: inputs ``(2K, 2K, 4)`` (the coarse image
    upsampled, the known pixels, the known mask, the wanted mask), a 3x3 stem, ``blocks``
    residual blocks of two 3x3 convolutions, and a 1x1 read-out; ``features`` channels out
    (the logits, or the shallow PixelCNN's conditioning)."""

    stem: jax.Array
    blocks: list[tuple[jax.Array, jax.Array, jax.Array, jax.Array]]
    head: jax.Array
    bias_stem: jax.Array
    bias_head: jax.Array

    def __init__(self, channels: int, blocks: int, features: int, *, key: jax.Array):
        keys = jax.random.split(key, 2 * blocks + 2)
        self.stem = dense(keys[0], (3, 3, 4, channels), 9 * 4)
        self.blocks = [(dense(keys[1 + 2 * b], (3, 3, channels, channels), 9 * channels),
                        jnp.zeros(channels),
                        dense(keys[2 + 2 * b], (3, 3, channels, channels), 9 * channels)
                        * 0.1, jnp.zeros(channels)) for b in range(blocks)]
        self.head = dense(keys[-1], (channels, features), channels) * 0.1
        self.bias_stem = jnp.zeros(channels)
        self.bias_head = jnp.zeros(features)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        h = _same_conv(inputs, self.stem) + self.bias_stem
        for w1, b1, w2, b2 in self.blocks:
            h = h + _same_conv(jax.nn.relu(_same_conv(jax.nn.relu(h), w1) + b1), w2) + b2
        return jax.nn.relu(h) @ self.head + self.bias_head


def group_inputs(fine: jax.Array, group: int, levels: int) -> jax.Array:
    """The inputs of group ``group`` (0, 1, 2 for the paper's groups 2, 3, 4) at the finer
    resolution ``(2K, 2K, 4)``: the coarse image ``fine[::2, ::2]`` upsampled by repetition,
    the pixels of the coarse image and of the earlier groups (zero elsewhere: later groups
    cannot leak in, their gradient is exactly zero), the known mask and the wanted mask."""
    size = fine.shape[0]
    block = jnp.zeros((2, 2)).at[0, 0].set(1.0)
    for r, c in GROUPS[:group]:
        block = block.at[r, c].set(1.0)
    known = jnp.tile(block, (size // 2, size // 2))
    wanted = jnp.tile(jnp.zeros((2, 2)).at[GROUPS[group]].set(1.0), (size // 2, size // 2))
    values = scaled(fine, levels)
    coarse = jnp.repeat(jnp.repeat(values[::2, ::2], 2, 0), 2, 1)
    return jnp.stack([coarse, values * known, known, wanted], -1)


class MultiscalePixelCNN(eqx.Module):
    """The parallel multiscale PixelCNN for ``(size, size)`` images, ``size = base * 2**k``:
    ``base_model`` (a ``GatedPixelCNN``) for the ``base x base`` image and, per doubling,
    three ``GroupNet``s (and three shallow ``GatedPixelCNN``s with ``shallow``)."""

    base_model: GatedPixelCNN
    groups: list[list[GroupNet]]  # [doubling][group]
    shallow_models: list[list[GatedPixelCNN]] | None
    size: int = eqx.field(static=True)
    base: int = eqx.field(static=True)
    levels: int = eqx.field(static=True)

    def __init__(self, size: int = 32, base: int = 4, levels: int = 2, *,
                 base_channels: int = 32, base_layers: int = 4, channels: int = 24,
                 blocks: int = 2, shallow: bool = False, key: jax.Array):
        scales = doublings(size, base)
        keys = jax.random.split(key, 3)
        self.base_model = GatedPixelCNN(levels, base_channels, base_layers,
                                        first_kernel=min(7, 2 * base - 1), key=keys[0])
        features = channels if shallow else outputs(levels)
        group_keys = jax.random.split(keys[1], (scales, 3))
        self.groups = [[GroupNet(channels, blocks, features, key=group_keys[s, g])
                        for g in range(3)] for s in range(scales)]
        shallow_keys = jax.random.split(keys[2], (scales, 3))
        self.shallow_models = ([[GatedPixelCNN(levels, channels // 2, 1, first_kernel=3,
                                               cond_channels=channels, key=shallow_keys[s, g])
                                 for g in range(3)] for s in range(scales)]
                               if shallow else None)
        self.size, self.base, self.levels = size, base, levels

    @property
    def scales(self) -> int:
        return len(self.groups)

    def group_logits(self, fine: jax.Array, scale: int, group: int) -> jax.Array:
        """Logits ``(K, K, outputs)`` of group ``group``'s pixels at doubling ``scale`` from
        the finer image ``fine`` ``(2K, 2K)`` (only its coarse image and earlier groups are
        read). Without ``shallow`` this is one network evaluation."""
        features = self.groups[scale][group](group_inputs(fine, group, self.levels))
        r, c = GROUPS[group]
        features = features[r::2, c::2]
        if self.shallow_models is None:
            return features
        return self.shallow_models[scale][group](fine[r::2, c::2], features)

    def log_prob(self, x: jax.Array) -> jax.Array:
        """``log p(x)`` in nats for one ``(size, size)`` image: the base image's and every
        group's conditional log-likelihood."""
        f = self.size // self.base
        total = self.base_model.log_prob(x[::f, ::f])
        for s in range(self.scales):
            step = f // 2 ** (s + 1)
            fine = x[::step, ::step]
            for g, (r, c) in enumerate(GROUPS):
                logits = self.group_logits(fine, s, g)
                total = total + pixel_log_prob(logits, fine[r::2, c::2], self.levels).sum()
        return total


def doublings(size: int, base: int) -> int:
    """``k`` with ``size == base * 2**k``; a one-line error otherwise."""
    if base < 1:
        raise ValueError(f"base size {base} must be at least 1")
    k = 0
    while base * 2**k < size:
        k += 1
    if base * 2**k != size:
        raise ValueError(f"image size {size} is not the base size {base} times a power of 2; "
                         f"use a size in {[base * 2**i for i in range(1, 7)]} or another base")
    return k


def evaluations(size: int, base: int | None = None, shallow: bool = False) -> dict[str, int]:
    """Network evaluations to sample one ``size x size`` image: the sequential PixelCNN's
    (``base`` None) is one per pixel; the multiscale model's is ``base**2`` (its base
    PixelCNN) + 3 per doubling deep passes, and with ``shallow`` also one shallow pass per
    pixel outside the base image."""
    if base is None:
        return {"deep": size * size, "shallow": 0}
    k = doublings(size, base)
    return {"deep": base * base + 3 * k, "shallow": size * size - base * base if shallow else 0}


def parameter_count(model: eqx.Module) -> int:
    return sum(a.size for a in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))
