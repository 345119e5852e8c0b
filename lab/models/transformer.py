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

The projections are separate ``eqx.nn.Linear`` layers (``query``, ``key``, ``value``,
``output``, ``mlp_in``, ``mlp_out``; weights ``(out, in)``) so that each can be given its own
sharding: Megatron's tensor parallelism splits ``query``/``key``/``value``/``mlp_in`` by output
rows (whole heads per device) and ``output``/``mlp_out`` by input columns.
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


class Attention(eqx.Module):
    """Multi-head self-attention's projections around a pluggable ``attend``."""

    query: eqx.nn.Linear
    key: eqx.nn.Linear
    value: eqx.nn.Linear
    output: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, hidden: int, heads: int, *, key: jax.Array):
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} does not divide into {heads} heads")
        kq, kk, kv, ko = jax.random.split(key, 4)
        self.query = eqx.nn.Linear(hidden, hidden, key=kq)
        self.key = eqx.nn.Linear(hidden, hidden, key=kk)
        self.value = eqx.nn.Linear(hidden, hidden, key=kv)
        self.output = eqx.nn.Linear(hidden, hidden, key=ko)
        self.heads = heads

    def __call__(self, x: jax.Array, attend: Attend, causal: bool) -> jax.Array:
        length, hidden = x.shape

        def heads(layer):  # (L, H) -> (L, Z, A): head z owns features z*A ... (z+1)*A - 1
            return jax.vmap(layer)(x).reshape(length, self.heads, hidden // self.heads)

        out = attend(heads(self.query), heads(self.key), heads(self.value), causal)
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
