"""``lab.models.transformer``, ``lab.parallel.ring.blockwise_attention``,
``lab.data.retrieval`` and the one-device parts of ``lab.train.sequence_parallel``, on one
device against hand-computed values and closed forms. The sequence-parallel attentions and
steps on 8 simulated devices are in ``tests/test_sequence_parallel.py``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lab.data import retrieval
from lab.models.transformer import (
    Attention,
    Transformer,
    causal_mask,
    full_attention,
    fuse_qkv,
    split_qkv,
)
from lab.parallel.ring import blockwise_attention
from lab.train.sequence_parallel import init, make_step, make_train, token_sums

TASK = retrieval.Retrieval(length=32, keys=4, values=8, fillers=16, queries=4)
BATCH = eqx.filter_jit(retrieval.batch)  # (B, L) tokens and targets; B = 2 throughout


def transformer(causal=False, key=0) -> Transformer:
    """A one-layer model for ``TASK``, hidden size 16 in 2 heads. Built eagerly, always at
    these sizes: its first construction compiles each initialiser, later ones reuse them."""
    return Transformer(TASK.vocab, TASK.values, 16, 2, 1, TASK.length, causal=causal,
                       key=jax.random.key(key))


def qkv(length=8, heads=2, dim=4, key=0):
    """Random ``(L, Z, A)`` queries, keys and values."""
    return tuple(jax.random.normal(k, (length, heads, dim))
                 for k in jax.random.split(jax.random.key(key), 3))


def test_causal_mask_compares_global_positions():
    # queries at global positions 2 and 3 (a device's chunk) against keys 0 ... 3
    mask = causal_mask(jnp.array([2, 3]), jnp.arange(4))
    np.testing.assert_array_equal(mask, [[True, True, True, False], [True, True, True, True]])
    # a chunk of keys entirely after the queries is masked out
    assert not causal_mask(jnp.arange(2), jnp.array([4, 5])).any()


def test_full_attention_zero_queries_average_values():
    _, k, v = qkv()
    out = full_attention(jnp.zeros_like(v), k, v, causal=False)  # equal scores: a mean
    np.testing.assert_allclose(out, jnp.broadcast_to(v.mean(0), v.shape), atol=1e-6)
    causal = full_attention(jnp.zeros_like(v), k, v, causal=True)  # running mean
    running = jnp.cumsum(v, axis=0) / jnp.arange(1, 9)[:, None, None]
    np.testing.assert_allclose(causal, running, atol=1e-6)
    np.testing.assert_array_equal(causal[0], v[0])  # position 0 sees only itself


def test_full_attention_hand_softmax_with_scale():
    # one head of width 4 (scale 1/2), two keys: scores 0 and log 3, weights 1/4 and 3/4
    q = jnp.ones((2, 1, 4))
    k = jnp.stack([jnp.zeros(4), jnp.full(4, np.log(3.0) / 2)])[:, None]
    v = jnp.stack([jnp.zeros(4), jnp.full(4, 4.0)])[:, None]
    np.testing.assert_allclose(full_attention(q, k, v, causal=False), 3.0, rtol=1e-6)
    causal = full_attention(q, k, v, causal=True)
    np.testing.assert_allclose(causal[0], 0.0)  # only key 0
    np.testing.assert_allclose(causal[1], 3.0, rtol=1e-6)


def test_blockwise_attention_matches_full_attention_values_and_gradients():
    q, k, v = qkv(length=64, heads=2, dim=8, key=1)
    cotangent = jax.random.normal(jax.random.key(2), q.shape)

    def values_and_gradients(attend, causal):
        out, back = jax.vjp(lambda q, k, v: attend(q, k, v, causal), q, k, v)
        return out, *back(cotangent)

    @jax.jit
    def both():
        return {(name, causal): values_and_gradients(attend, causal) for causal in (False, True)
                for name, attend in (("full", full_attention), ("block", blockwise_attention(16)))}

    results = both()
    for causal in (False, True):
        for full, block in zip(results["full", causal], results["block", causal], strict=True):
            np.testing.assert_allclose(block, full, atol=1e-5)
    # causal and not really differ (the comparison above is not vacuous)
    assert np.abs(results["full", True][0] - results["full", False][0]).max() > 0.1


def test_blockwise_attention_block_not_dividing_length_raises():
    q, k, v = qkv(length=40)
    with pytest.raises(ValueError, match="block 16 does not divide the sequence length 40"):
        blockwise_attention(16)(q, k, v, False)


def test_attention_hidden_not_divisible_by_heads_raises():
    with pytest.raises(ValueError, match="hidden size 10 does not divide into 4 heads"):
        Transformer(8, 2, hidden=10, heads=4, layers=1, max_length=4, key=jax.random.key(0))


def test_fuse_qkv_megatron_layout_whole_heads_per_device():
    # hidden 4 in 2 heads of width 2; row r of q, k, v holds 10 r + 0, 1, 2
    q, k, v = (jnp.broadcast_to(10 * jnp.arange(4.0)[:, None] + i, (4, 3)) for i in range(3))
    fused = fuse_qkv(q, k, v, heads=2)
    # per head: its query rows, its key rows, its value rows (Megatron-LM's query_key_value)
    np.testing.assert_array_equal(fused[:, 0], [0, 10, 1, 11, 2, 12, 20, 30, 21, 31, 22, 32])
    for part, want in zip(split_qkv(fused, heads=2), (q, k, v), strict=True):
        np.testing.assert_array_equal(part, want)
    # a column split over 2 model devices: device d holds head d's q, k and v, nothing else
    for d, rows in enumerate(jnp.split(fused[:, 0], 2)):
        np.testing.assert_array_equal(rows, [20 * d, 20 * d + 10, 20 * d + 1, 20 * d + 11,
                                             20 * d + 2, 20 * d + 12])
    biases = fuse_qkv(q[:, 0], k[:, 0], v[:, 0], heads=2)  # (H,) biases alike
    np.testing.assert_array_equal(biases, fused[:, 0])


def test_attention_fused_qkv_is_three_separate_projections():
    """Separate query, key and value layers mapped into the fused layout give the output of
    ``attend(Wq x + bq, Wk x + bk, Wv x + bv)`` split into heads by hand; and the fused layer
    is initialised with the three layers that the keys of the separate version made."""
    hidden, heads, length = 16, 4, 8
    kx, ka, kq, kk, kv = jax.random.split(jax.random.key(11), 5)
    x = jax.random.normal(kx, (length, hidden))
    attention = Attention(hidden, heads, key=ka)
    q, k, v = (eqx.nn.Linear(hidden, hidden, key=key) for key in (kq, kk, kv))
    attention = eqx.tree_at(lambda a: (a.qkv.weight, a.qkv.bias), attention,
                            (fuse_qkv(q.weight, k.weight, v.weight, heads),
                             fuse_qkv(q.bias, k.bias, v.bias, heads)))

    def separate(x):
        def project(layer):  # (L, H) -> (L, Z, A): head z owns features 4z ... 4z + 3
            return (x @ layer.weight.T + layer.bias).reshape(length, heads, hidden // heads)
        out = full_attention(project(q), project(k), project(v), causal=True)
        return out.reshape(length, hidden) @ attention.output.weight.T + attention.output.bias

    run = eqx.filter_jit(lambda a, x: a(x, full_attention, True))
    fused = run(attention, x)
    np.testing.assert_allclose(fused, separate(x), atol=1e-5)
    # swapping the key and value rows changes the function: the layout is not vacuous
    swapped = eqx.tree_at(lambda a: a.qkv.weight, attention,
                          fuse_qkv(q.weight, v.weight, k.weight, heads))
    assert np.abs(run(swapped, x) - fused).max() > 1e-3
    # initialisation: the three hidden x hidden layers from the split of the key, fused
    kq, kk, kv, _ = jax.random.split(ka, 4)
    made = Attention(hidden, heads, key=ka)
    for part, key in zip(split_qkv(made.qkv.weight, heads), (kq, kk, kv), strict=True):
        np.testing.assert_array_equal(part, eqx.nn.Linear(hidden, hidden, key=key).weight)


def test_transformer_output_shape_and_causality():
    tokens = BATCH(TASK, jax.random.key(3), 2)[0][0]
    changed = tokens.at[20:].set((tokens[20:] + 1) % TASK.vocab)  # tokens after t = 19 change
    outputs = eqx.filter_jit(lambda net: (net(tokens), net(changed)))
    causal, changed_causal = outputs(transformer(causal=True))
    assert causal.shape == (TASK.length, TASK.values)
    np.testing.assert_allclose(changed_causal[:20], causal[:20], atol=1e-6)
    assert np.abs(changed_causal[20:] - causal[20:]).max() > 1e-3
    bidirectional, changed_bidirectional = outputs(transformer())
    assert bidirectional.shape == (TASK.length, TASK.values)
    assert np.abs(changed_bidirectional[:20] - bidirectional[:20]).max() > 1e-3


def test_transformer_positions_offset_learned_positions():
    """With an ``attend`` that is the identity on the values every part of the model is
    token-wise, so the model on a chunk at its global positions is the slice of the model on
    the whole sequence; at the default positions (0, 1, ...) it is not."""
    tokens = BATCH(TASK, jax.random.key(4), 2)[0][0]

    def identity(q, k, v, causal):
        return v

    @eqx.filter_jit
    def run(model):
        return (model(tokens, attend=identity),
                model(tokens[8:16], jnp.arange(8, 16), attend=identity),
                model(tokens[8:16], attend=identity))

    whole, chunk, unshifted = run(transformer(key=1))
    np.testing.assert_allclose(chunk, whole[8:16], atol=1e-6)
    assert np.abs(unshifted - whole[8:16]).max() > 1e-3


def test_retrieval_sample_layout_and_answers():
    key = jax.random.key(5)
    tokens, targets = (np.asarray(x) for x in BATCH(TASK, key, 2))
    # batch stacks samples from the split keys
    first = eqx.filter_jit(retrieval.sample)(TASK, jax.random.split(key, 2)[0])
    np.testing.assert_array_equal(tokens[0], first[0])
    np.testing.assert_array_equal(targets[0], first[1])
    half, asked = TASK.length // 2, TASK.keys * TASK.values
    first_filler = asked + TASK.keys
    assert tokens.shape == targets.shape == (2, TASK.length)
    assert tokens.dtype == targets.dtype == np.int32
    assert TASK.vocab == first_filler + TASK.fillers
    for seq, target in zip(tokens, targets, strict=True):
        records = np.flatnonzero(seq < asked)
        assert len(records) == TASK.keys and (records < half).all()
        keys, values = np.divmod(seq[records], TASK.values)  # record = key * values + value
        assert sorted(keys) == list(range(TASK.keys))  # every key once
        value_of = dict(zip(keys, values, strict=True))
        questions = seq[-TASK.queries:]
        assert ((questions >= asked) & (questions < first_filler)).all()
        np.testing.assert_array_equal(target[-TASK.queries:],
                                      [value_of[q - asked] for q in questions])
        np.testing.assert_array_equal(target[:-TASK.queries], -1)
        fillers = np.delete(seq[:-TASK.queries], records)
        assert ((fillers >= first_filler) & (fillers < TASK.vocab)).all()
    assert len(np.unique(targets[targets >= 0])) > 1  # the values really vary


def test_retrieval_bad_sizes_raise():
    with pytest.raises(ValueError, match="5 records and 2 questions"):
        retrieval.Retrieval(length=8, keys=5, queries=2)
    with pytest.raises(ValueError, match="4 records and 0 questions"):
        retrieval.Retrieval(length=8, keys=4, queries=0)
    with pytest.raises(ValueError, match="4 records and 5 questions"):
        retrieval.Retrieval(length=8, keys=4, queries=5)


def test_token_sums_hand_cross_entropy_ignores_missing_targets():
    log3 = np.log(3.0)
    # softmax rows: (1/4, 3/4), (1/4, 3/4), and a row without a target whose arg-max (0) is
    # the placeholder label: counted neither in the loss nor as correct
    logits = jnp.array([[0.0, log3], [0.0, log3], [50.0, 0.0]])
    sums = jax.jit(token_sums)
    xent, count, correct = sums(logits, jnp.array([1, 0, -1]))
    np.testing.assert_allclose(xent, np.log(4 / 3) + np.log(4.0), rtol=1e-6)
    assert (int(count), int(correct)) == (2, 1)
    # leading axes are summed over too: (batch, positions, classes)
    batched = sums(jnp.stack([logits, logits]), jnp.array([[1, 0, -1], [1, -1, -1]]))
    np.testing.assert_allclose(batched[0], 2 * np.log(4 / 3) + np.log(4.0), rtol=1e-6)
    assert (int(batched[1]), int(batched[2])) == (3, 2)


@pytest.fixture(scope="module")
def small():
    """``transformer()`` made by ``init``, its SGD state and the jitted one-device step."""
    optimizer = optax.sgd(0.1)
    model, opt_state = init(TASK, optimizer, hidden=16, heads=2, layers=1, key=jax.random.key(7))
    return model, opt_state, make_step(optimizer, None)


def test_make_step_one_device_loss_is_mean_cross_entropy_over_targets(small):
    model, opt_state, step = small
    tokens, targets = BATCH(TASK, jax.random.key(8), 2)
    new, _, metrics = step(model, opt_state, tokens, targets)
    logits = np.asarray(eqx.filter_jit(lambda m, t: jax.vmap(m)(t))(model, tokens), np.float64)
    rows, cols = np.nonzero(np.asarray(targets) >= 0)
    labels = np.asarray(targets)[rows, cols]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(metrics.loss, -log_probs[rows, cols, labels].mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics.accuracy,
                               (logits[rows, cols].argmax(-1) == labels).mean())
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: jnp.abs(a - b).max(),
                                         eqx.filter(new, eqx.is_array),
                                         eqx.filter(model, eqx.is_array)))
    assert max(moved) > 0  # the step updates the model


def test_make_train_runs_the_steps_on_batches_from_folded_keys(small):
    model, opt_state, step = small
    key = jax.random.key(10)
    _, _, metrics = make_train(step, TASK, 2)(model, opt_state, key, 2, first=3)
    assert metrics.loss.shape == metrics.accuracy.shape == (2,)
    # step t's batch comes from fold_in(key, t): here t = 3, then t = 4
    by_hand = model, opt_state
    for t in (3, 4):
        tokens, targets = BATCH(TASK, jax.random.fold_in(key, t), 2)
        *by_hand, expected = step(*by_hand, tokens, targets)
        np.testing.assert_allclose(metrics.loss[t - 3], expected.loss, rtol=1e-5)
