"""Networks cut depthwise into components, each with an auxiliary head.

Interlocking backpropagation (Gomez, Key, Perlin, Gou, Frosst, Dean, Gal, arXiv 2010.04116)
trains a network written as a list of ``K`` components ``f_1 ... f_K`` (one per device) and
``K - 1`` auxiliary heads ``a_1 ... a_{K-1}``: ``h_k = f_k(h_{k-1})`` with ``h_0 = x``, the
last component's output ``h_K`` is the network's prediction, and head ``a_k`` reads ``h_k``.
A ``Stack`` holds them; ``lab.models.interlocking_rule`` says which loss trains which part
and ``lab.train.interlocking`` trains them.

Two families, each taking ONE example per call (batch with ``jax.vmap``):

- ``resnet(...)``: a small ResNet for ``(28, 28, 1)`` images in four components of
  ``blocks`` residual blocks each: a stride-2 stem convolution to 14x14 then a stage, a stage
  that starts with a stride-2 block to 7x7, another to 4x4, a stage + global pool + linear.
  The stride-2 stem (as in the ImageNet ResNets, without their max-pool) keeps a CPU step
  fast. The heads are the paper's auxiliary network scaled down: conv 3x3 - norm - ReLU -
  conv 3x3 - norm - ReLU - global average pool - linear (the official code's
  ``conv128_bn_conv64_bn_gbpl_fc`` with ``2h`` and ``h`` channels, ``h`` smaller than the
  components' widths: as in the paper, a head costs a fraction of its component).
  **Deviation:** GroupNorm (per example, 4 groups) in place of BatchNorm, so that every
  module is a function of one example and a train step needs no running statistics.
- ``char_transformer(...)``: a causal character-level Transformer language model
  (``lab.models.transformer.Block``, pre-LN) with one block per component; the first also
  embeds tokens and positions, the last ends in LayerNorm + read-out. Each head is
  ``head_blocks`` causal Transformer blocks of its own (``BlockHead``), then LayerNorm + a
  linear read-out to the vocabulary; ``head_blocks = 0`` is the read-out alone
  (``ReadOut``), the smallest head that predicts the next character. **This text set-up is
  ours:** the paper's Transformer code and heads were never released (the official
  repository, oscarkey/interlocking-backprop, has the ResNet only). A read-out alone reads
  a stream that no block is trained for it; a block gives the head its own features, as
  the ResNet's conv heads have. ``parameter_counts`` gives the heads' sizes beside the
  components'.

Convolutions are ``lab.models.conv.conv2d`` (patches then one matmul: the fastest correct
formulation on this CPU) with explicit SAME padding.
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.conv import conv2d
from lab.models.init import normal
from lab.models.transformer import Block, full_attention


class Stack(eqx.Module):
    """``K`` components and ``K - 1`` heads: ``h_k = components[k](h_{k-1})``, and
    ``heads[k]`` reads ``h_k`` (zero-based); ``components[-1]`` outputs the prediction."""

    components: list
    heads: list

    def __call__(self, x: jax.Array) -> jax.Array:
        """The network's prediction for one example (the heads are not used)."""
        for component in self.components:
            x = component(x)
        return x


# the ResNet --------------------------------------------------------------------------------

class Conv(eqx.Module):
    """A SAME-padded ``k x k`` convolution with a bias, He-normal weights (the official code's
    ``kaiming_normal_``, fan-out)."""

    weight: jax.Array
    bias: jax.Array
    stride: int = eqx.field(static=True)

    def __init__(self, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, *,
                 key: jax.Array):
        std = (2.0 / (c_out * kernel * kernel)) ** 0.5
        self.weight = std * normal(key, (kernel, kernel, c_in, c_out))
        self.bias = jnp.zeros(c_out)
        self.stride = stride

    def __call__(self, x: jax.Array) -> jax.Array:
        pad = (self.weight.shape[0] - 1) // 2
        x = jnp.pad(x, ((pad, pad), (pad, pad), (0, 0)))
        return conv2d(x, self.weight, self.stride) + self.bias


class Norm(eqx.Module):
    """GroupNorm over ``(H, W, C)`` with ``groups`` groups of channels and a learned scale
    and shift per channel."""

    scale: jax.Array
    shift: jax.Array
    groups: int = eqx.field(static=True)

    def __init__(self, channels: int, groups: int = 4):
        if channels % groups:
            raise ValueError(f"{channels} channels do not split into {groups} groups")
        self.scale, self.shift = jnp.ones(channels), jnp.zeros(channels)
        self.groups = groups

    def __call__(self, x: jax.Array) -> jax.Array:
        h, w, c = x.shape
        g = x.reshape(h, w, self.groups, c // self.groups)
        mean = g.mean(axis=(0, 1, 3), keepdims=True)
        var = g.var(axis=(0, 1, 3), keepdims=True)
        g = (g - mean) * jax.lax.rsqrt(var + 1e-5)
        return g.reshape(h, w, c) * self.scale + self.shift


class ResBlock(eqx.Module):
    """``relu(x' + norm(conv(relu(norm(conv(x))))))`` where ``x'`` is ``x`` or, when the
    block changes shape, a 1x1 strided convolution of ``x`` with a norm."""

    conv1: Conv
    norm1: Norm
    conv2: Conv
    norm2: Norm
    shortcut: Conv | None
    shortcut_norm: Norm | None

    def __init__(self, c_in: int, c_out: int, stride: int = 1, *, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1, self.norm1 = Conv(c_in, c_out, 3, stride, key=k1), Norm(c_out)
        self.conv2, self.norm2 = Conv(c_out, c_out, 3, key=k2), Norm(c_out)
        if stride != 1 or c_in != c_out:
            self.shortcut, self.shortcut_norm = Conv(c_in, c_out, 1, stride, key=k3), Norm(c_out)
        else:
            self.shortcut, self.shortcut_norm = None, None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jax.nn.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        skip = x if self.shortcut is None else self.shortcut_norm(self.shortcut(x))
        return jax.nn.relu(y + skip)


class Stage(eqx.Module):
    """``blocks`` residual blocks, the first from ``c_in`` channels with ``stride``."""

    blocks: list[ResBlock]

    def __init__(self, c_in: int, c_out: int, blocks: int, stride: int = 1, *, key: jax.Array):
        keys = jax.random.split(key, blocks)
        self.blocks = [ResBlock(c_in if i == 0 else c_out, c_out, stride if i == 0 else 1,
                                key=k) for i, k in enumerate(keys)]

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


class Stem(eqx.Module):
    """The first component: a stride-2 ``conv - norm - ReLU``, then a stage."""

    conv: Conv
    norm: Norm
    stage: Stage

    def __init__(self, c_in: int, channels: int, blocks: int, *, key: jax.Array):
        kc, kb = jax.random.split(key)
        self.conv, self.norm = Conv(c_in, channels, 3, 2, key=kc), Norm(channels)
        self.stage = Stage(channels, channels, blocks, key=kb)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.stage(jax.nn.relu(self.norm(self.conv(x))))


class Classifier(eqx.Module):
    """The last component: a stage, global average pool, linear read-out."""

    stage: Stage
    readout: eqx.nn.Linear

    def __init__(self, channels: int, classes: int, blocks: int, *, key: jax.Array):
        kb, kr = jax.random.split(key)
        self.stage = Stage(channels, channels, blocks, key=kb)
        self.readout = eqx.nn.Linear(channels, classes, key=kr)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.readout(self.stage(x).mean(axis=(0, 1)))


class ConvHead(eqx.Module):
    """The auxiliary head: conv 3x3 (``2 c``) - norm - ReLU - conv 3x3 (``c``) - norm - ReLU
    - global average pool - linear."""

    conv1: Conv
    norm1: Norm
    conv2: Conv
    norm2: Norm
    readout: eqx.nn.Linear

    def __init__(self, c_in: int, channels: int, classes: int, *, key: jax.Array):
        k1, k2, kr = jax.random.split(key, 3)
        self.conv1, self.norm1 = Conv(c_in, 2 * channels, key=k1), Norm(2 * channels)
        self.conv2, self.norm2 = Conv(2 * channels, channels, key=k2), Norm(channels)
        self.readout = eqx.nn.Linear(channels, classes, key=kr)

    def __call__(self, h: jax.Array) -> jax.Array:
        y = jax.nn.relu(self.norm1(self.conv1(h)))
        y = jax.nn.relu(self.norm2(self.conv2(y)))
        return self.readout(y.mean(axis=(0, 1)))


def resnet(channels: int = 8, head_channels: int = 4, blocks: int = 2, classes: int = 10,
           c_in: int = 1, *, key: jax.Array) -> Stack:
    """A ResNet in four components of ``blocks`` residual blocks each, for ``(28, 28, c_in)``
    images: widths ``c, 2c, 4c, 4c`` at 14, 7, 4, 4 pixels; three conv heads of
    ``2 head_channels`` then ``head_channels``."""
    keys = jax.random.split(key, 7)
    c = channels
    components = [Stem(c_in, c, blocks, key=keys[0]), Stage(c, 2 * c, blocks, 2, key=keys[1]),
                  Stage(2 * c, 4 * c, blocks, 2, key=keys[2]),
                  Classifier(4 * c, classes, blocks, key=keys[3])]
    heads = [ConvHead(w, head_channels, classes, key=k)
             for w, k in zip((c, 2 * c, 4 * c), keys[4:], strict=True)]
    return Stack(components, heads)


# the character-level Transformer -----------------------------------------------------------

class Embed(eqx.Module):
    """The first component: token + position embeddings, then a block."""

    tokens: eqx.nn.Embedding
    positions: eqx.nn.Embedding
    block: Block

    def __init__(self, vocab: int, hidden: int, heads: int, length: int, *, key: jax.Array):
        kt, kp, kb = jax.random.split(key, 3)
        self.tokens = eqx.nn.Embedding(vocab, hidden, key=kt)
        self.positions = eqx.nn.Embedding(length, hidden, key=kp)
        self.block = Block(hidden, heads, key=kb)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = jax.vmap(self.tokens)(tokens) + jax.vmap(self.positions)(jnp.arange(tokens.shape[0]))
        return self.block(x, full_attention, True)


class Middle(eqx.Module):
    """A causal Transformer block on ``(L, hidden)``."""

    block: Block

    def __init__(self, hidden: int, heads: int, *, key: jax.Array):
        self.block = Block(hidden, heads, key=key)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.block(x, full_attention, True)


class ReadOut(eqx.Module):
    """LayerNorm, then a linear read-out per position: ``(L, hidden) -> (L, vocab)``. The
    language model's last layers and its auxiliary heads."""

    norm: eqx.nn.LayerNorm
    linear: eqx.nn.Linear

    def __init__(self, hidden: int, vocab: int, *, key: jax.Array):
        self.norm, self.linear = eqx.nn.LayerNorm(hidden), eqx.nn.Linear(hidden, vocab, key=key)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.vmap(lambda v: self.linear(self.norm(v)))(x)


class BlockHead(eqx.Module):
    """An auxiliary head of its own causal Transformer blocks, then the read-out:
    ``(L, hidden) -> (L, vocab)``."""

    blocks: list[Block]
    readout: ReadOut

    def __init__(self, hidden: int, heads: int, vocab: int, blocks: int, *, key: jax.Array):
        kb, kr = jax.random.split(key)
        self.blocks = [Block(hidden, heads, key=k) for k in jax.random.split(kb, blocks)]
        self.readout = ReadOut(hidden, vocab, key=kr)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x, full_attention, True)
        return self.readout(x)


class Last(eqx.Module):
    """The last component: a block, then the read-out."""

    block: Block
    readout: ReadOut

    def __init__(self, hidden: int, heads: int, vocab: int, *, key: jax.Array):
        kb, kr = jax.random.split(key)
        self.block, self.readout = Block(hidden, heads, key=kb), ReadOut(hidden, vocab, key=kr)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.readout(self.block(x, full_attention, True))


def char_transformer(vocab: int, hidden: int = 64, heads: int = 4, length: int = 64,
                     components: int = 4, head_blocks: int = 0, *, key: jax.Array) -> Stack:
    """A causal character LM over sequences of ``length`` tokens: one block per component
    (at least 2 components), ``components - 1`` heads of ``head_blocks`` blocks and a
    read-out (0: the read-out alone, ``ReadOut``, initialised as before heads had blocks)."""
    if components < 2:
        raise ValueError(f"the language model needs at least 2 components, got {components}")
    if head_blocks < 0:
        raise ValueError(f"head_blocks must be at least 0, got {head_blocks}")
    keys = jax.random.split(key, 2 * components)
    parts: list[Callable] = [Embed(vocab, hidden, heads, length, key=keys[0])]
    parts += [Middle(hidden, heads, key=k) for k in keys[1:components - 1]]
    parts.append(Last(hidden, heads, vocab, key=keys[components - 1]))
    head_keys = keys[components:2 * components - 1]
    if head_blocks == 0:
        heads_ = [ReadOut(hidden, vocab, key=k) for k in head_keys]
    else:
        heads_ = [BlockHead(hidden, heads, vocab, head_blocks, key=k) for k in head_keys]
    return Stack(parts, heads_)


def parameter_counts(stack: Stack) -> dict[str, list[int]]:
    """The number of trainable parameters (inexact array elements) of each component and
    each head: ``{"components": [...], "heads": [...]}``. ``stack`` may be
    ``jax.eval_shape``'s (shapes only: nothing is initialised)."""
    def count(module) -> int:
        return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(module)
                   if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact))

    return {"components": [count(c) for c in stack.components],
            "heads": [count(h) for h in stack.heads]}
