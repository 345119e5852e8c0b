"""A pre-LN Transformer encoder whose attention is a function you pass in.

``Transformer(vocab, classes, hidden, heads, layers, max_length, causal=False, key=key)``
maps one sequence of token ids ``(L,)`` to logits ``(L, classes)``: learned token and position
embeddings, ``layers`` pre-LN blocks ``x + attention(LN(x))`` then ``x + MLP(LN(x))`` with a
GELU MLP of width ``4 * hidden``, a final LayerNorm and a linear read-out per position.

Attention is a function ``attend(q, k, v, causal) -> out`` on one sequence's per-head
queries, keys and values, each ``(L, heads, head_dim)``; ``full_attention`` (the default) is
softmax(q k^T / sqrt(head_dim)) v over the whole sequence. Everything else in the model is
token-wise, so the same model runs on a chunk of a sequence: pass the chunk's tokens, their
global ``positions`` and a sequence-parallel ``attend`` (``lab.parallel.ring``) that fetches
the other chunks' keys and values from the other devices.

The projections are ``eqx.nn.Linear`` layers (weights ``(out, in)``): ``attention.qkv``,
``attention.output``, ``mlp_in`` and ``mlp_out``, each of which can be given its own
sharding. ``qkv`` is ONE ``(3 * hidden, hidden)`` projection producing the queries, keys and
values, laid out as Megatron-LM lays out its fused ``query_key_value`` (Shoeybi et al. 2019,
arXiv 1909.08053): the output split per head, head ``z`` (of width ``A``) owning rows
``3Az ... 3A(z + 1) - 1`` as its query, key and value rows in that order (``fuse_qkv``). So
Megatron's tensor parallelism, which splits ``qkv`` and ``mlp_in`` by output rows and
``output``/``mlp_out`` by input columns, gives each model device whole heads' queries, keys
and values, and the backward pass all-reduces the attention input's gradient once, as
Megatron-LM does (with three separate projections XLA all-reduced it three times:
``lab.parallel.megatron``). The fused layer is initialised as three ``hidden x hidden``
layers would be, from the same keys, so the model is the function three separate
projections ``q = Wq x + bq`` (and so on) compute, with ``Wq`` and ``bq`` from ``split_qkv``.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

Attend = Callable[[jax.Array, jax.Array, jax.Array, bool], jax.Array]


def causal_mask(q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """``(Lq, Lk)`` booleans: query i may attend to key j when ``k_positions[j] <=
    q_positions[i]`` (global positions, so chunks held by different devices agree)."""
    return k_positions[None, :] <= q_positions[:, None]


def full_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool) -> jax.Array:
    """Exact multi-head attention over one whole sequence: ``q, k, v`` are ``(L, Z, A)``;
    returns ``(L, Z, A)``. With ``causal`` a position attends to itself and earlier ones."""
    scores = jnp.einsum("qza,kza->zqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    if causal:
        positions = jnp.arange(q.shape[0])
        scores = jnp.where(causal_mask(positions, positions), scores, -jnp.inf)
    return jnp.einsum("zqk,kza->qza", jax.nn.softmax(scores, axis=-1), v)


def fuse_qkv(q: jax.Array, k: jax.Array, v: jax.Array, heads: int) -> jax.Array:
    """Three projections' weights ``(H, in)`` (or biases ``(H,)``), ``H = heads * A`` with head
    ``z`` at rows ``Az ... A(z + 1) - 1``, as one ``(3H, ...)`` array in Megatron-LM's
    layout: head ``z``'s query, key and value rows at ``3Az + [0, A)``, ``3Az + [A, 2A)`` and
    ``3Az + [2A, 3A)``."""
    stacked = jnp.stack([q, k, v])  # (3, H, ...)
    per_head = stacked.reshape(3, heads, q.shape[0] // heads, *q.shape[1:])
    return jnp.swapaxes(per_head, 0, 1).reshape(3 * q.shape[0], *q.shape[1:])


def split_qkv(fused: jax.Array, heads: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The inverse of ``fuse_qkv``: the query, key and value rows of a ``(3H, ...)`` array."""
    per_head = fused.reshape(heads, 3, fused.shape[0] // (3 * heads), *fused.shape[1:])
    q, k, v = (part.reshape(fused.shape[0] // 3, *fused.shape[1:])
               for part in jnp.swapaxes(per_head, 0, 1))
    return q, k, v


class Attention(eqx.Module):
    """Multi-head self-attention's projections around a pluggable ``attend``: the fused
    ``qkv`` (see the module docstring) and the ``output`` projection."""

    qkv: eqx.nn.Linear
    output: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, hidden: int, heads: int, *, key: jax.Array):
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} does not divide into {heads} heads")
        kq, kk, kv, ko = jax.random.split(key, 4)
        q, k, v = (eqx.nn.Linear(hidden, hidden, key=kx) for kx in (kq, kk, kv))
        fused = eqx.nn.Linear(hidden, 3 * hidden, key=kq)  # its shapes; the values follow
        self.qkv = eqx.tree_at(lambda layer: (layer.weight, layer.bias), fused,
                               (fuse_qkv(q.weight, k.weight, v.weight, heads),
                                fuse_qkv(q.bias, k.bias, v.bias, heads)))
        self.output = eqx.nn.Linear(hidden, hidden, key=ko)
        self.heads = heads

    def __call__(self, x: jax.Array, attend: Attend, causal: bool) -> jax.Array:
        length, hidden = x.shape
        # (L, 3H) -> (L, Z, 3, A): head z's query, key and value, each A wide
        qkv = jax.vmap(self.qkv)(x).reshape(length, self.heads, 3, hidden // self.heads)
        out = attend(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal)
        return jax.vmap(self.output)(out.reshape(length, hidden))


class Block(eqx.Module):
    """``x + attention(LN(x))``, then ``x + W2 gelu(W1 LN(x))``."""

    norm1: eqx.nn.LayerNorm
    attention: Attention
    norm2: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(self, hidden: int, heads: int, *, key: jax.Array):
        ka, k1, k2 = jax.random.split(key, 3)
        self.norm1 = eqx.nn.LayerNorm(hidden)
        self.attention = Attention(hidden, heads, key=ka)
        self.norm2 = eqx.nn.LayerNorm(hidden)
        self.mlp_in = eqx.nn.Linear(hidden, 4 * hidden, key=k1)
        self.mlp_out = eqx.nn.Linear(4 * hidden, hidden, key=k2)

    def attention_half(self, x: jax.Array, attend: Attend, causal: bool) -> jax.Array:
        """The attention sub-block with its residual, ``x + attention(LN(x))``."""
        return x + self.attention(jax.vmap(self.norm1)(x), attend, causal)

    def mlp_half(self, x: jax.Array) -> jax.Array:
        """The MLP sub-block with its residual, ``x + W2 gelu(W1 LN(x))``."""
        h = jax.nn.gelu(jax.vmap(self.mlp_in)(jax.vmap(self.norm2)(x)))
        return x + jax.vmap(self.mlp_out)(h)

    def __call__(self, x: jax.Array, attend: Attend, causal: bool) -> jax.Array:
        return self.mlp_half(self.attention_half(x, attend, causal))


class Transformer(eqx.Module):
    """Token ids ``(L,)`` -> logits ``(L, classes)``; see the module docstring."""

    embed: eqx.nn.Embedding
    position: eqx.nn.Embedding
    blocks: list[Block]
    norm: eqx.nn.LayerNorm
    readout: eqx.nn.Linear
    causal: bool = eqx.field(static=True)

    def __init__(self, vocab: int, classes: int, hidden: int, heads: int, layers: int,
                 max_length: int, *, causal: bool = False, key: jax.Array):
        ke, kp, kb, kr = jax.random.split(key, 4)
        self.embed = eqx.nn.Embedding(vocab, hidden, key=ke)
        self.position = eqx.nn.Embedding(max_length, hidden, key=kp)
        self.blocks = [Block(hidden, heads, key=k) for k in jax.random.split(kb, layers)]
        self.norm = eqx.nn.LayerNorm(hidden)
        self.readout = eqx.nn.Linear(hidden, classes, key=kr)
        self.causal = causal

    def __call__(self, tokens: jax.Array, positions: jax.Array | None = None,
                 attend: Attend = full_attention) -> jax.Array:
        """``tokens (L,)`` at global ``positions (L,)`` (``arange(L)`` by default)."""
        if positions is None:
            positions = jnp.arange(tokens.shape[0])
        x = jax.vmap(self.embed)(tokens) + jax.vmap(self.position)(positions)
        for block in self.blocks:
            x = block(x, attend, self.causal)
        return jax.vmap(self.readout)(jax.vmap(self.norm)(x))
