"""Interlocking backpropagation: the training rules against the official code's hand-computed
cases and against ``jax.grad``, the bad-input errors, and the schedule model against
hand-computed timelines."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lab.models.interlocking import (
    BlockHead,
    ReadOut,
    Stack,
    char_transformer,
    parameter_counts,
    resnet,
)
from lab.parallel import interlocking as schedule
from lab.train import interlocking as il
from tests.devices import run


class Scale(eqx.Module):
    """The official tests' ``_TestNet``: ``p * x``, elementwise."""

    p: jax.Array

    def __call__(self, x):
        return self.p * x


class Dense(eqx.Module):
    linear: eqx.nn.Linear

    def __init__(self, n_in, n_out, key):
        self.linear = eqx.nn.Linear(n_in, n_out, key=key)

    def __call__(self, x):
        return jnp.tanh(self.linear(x))


def fake_loss(logits, labels):
    """The official tests' ``FakeLossFunction(0.1)``: every logit's gradient is 0.1."""
    return 0.1 * logits.sum()


def scales(ps, qs):
    return Stack([Scale(jnp.array(p)) for p in ps], [Scale(jnp.array(q)) for q in qs])


def one_sgd_step(stack, n, x, y, mode="only"):
    """One step of rule ``n`` with SGD, learning rate 1 (parameters minus gradients)."""
    optimizer = optax.sgd(1.0)
    step = il.make_step(optimizer, n, fake_loss, il.cross_entropy, mode)
    stack, _, _ = step(stack, optimizer.init(eqx.filter(stack, eqx.is_inexact_array)), x, y)
    return [np.asarray(c.p) for c in stack.components]


X, Y = jnp.array([[1.0, 1.0]]), jnp.array([1])


@pytest.mark.parametrize("n, expected", [
    # local: components 1, 2 on their own heads' cross-entropy, 3 on the true loss
    (1, [[1.5, 2.5], [2.0, 4.0], [3.4, 3.4]]),
    # pairwise: 1 on head 2's loss through component 2; 2 and 3 on the true loss
    (2, [[0.5, 3.5], [2.2, 2.2], [3.4, 3.4]]),
])
def test_rules_match_the_official_hand_computed_cases(n, expected):
    stack = scales([[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]], [[1.0, 1.0]] * 2)
    for got, want in zip(one_sgd_step(stack, n, X, Y), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# The official repository's skipped tests test__pairwise_sum__ and test__pairwise_mean__
# (tests/test_model.py): x = [1, 1], components 2, 3, 4, heads 1 (cross-entropy, label 1:
# every head's logit gradient is [0.5, -0.5]), the true loss's logit gradient 0.1.
# Component 3: 0.1 * h2 = [0.6, 0.6]. Component 2: through 3, 0.4 * h1 = [0.8, 0.8]; its own
# head, [0.5, -0.5] * h1 = [1, -1]. Component 1: head 2 through 2, [1.5, -1.5] * x; its own
# head, [0.5, -0.5] * x.
@pytest.mark.parametrize("mode, expected", [
    ("sum", [[0.0, 4.0], [1.2, 3.2], [3.4, 3.4]]),  # [2, -2], [1.8, -0.2], [0.6, 0.6]
    ("mean", [[1.0, 3.0], [2.1, 3.1], [3.4, 3.4]]),  # [1, -1], [0.9, -0.1], [0.6, 0.6]
])
def test_pairwise_sum_and_mean_match_the_official_hand_computed_cases(mode, expected):
    stack = scales([[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]], [[1.0, 1.0]] * 2)
    for got, want in zip(one_sgd_step(stack, 2, X, Y, mode), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("mode, expected", [
    # 3-wise alone (the distance-two case below): [6, -6], [4, 4], [3, 3], [2.4, 2.4]; own
    # heads: [0.5, -0.5] * x, * h1 = [2, 2], * h2 = [6, 6]; the last on the true loss alone
    ("sum", [[-4.5, 8.5], [-2.0, 0.0], [-2.0, 4.0], [2.6, 2.6]]),
    ("mean", [[-1.25, 5.25], [0.5, 1.5], [1.0, 4.0], [2.6, 2.6]]),
])
def test_three_wise_sum_and_mean_add_each_components_own_head_by_hand(mode, expected):
    stack = scales([[2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [5.0, 5.0]], [[1.0, 1.0]] * 3)
    for got, want in zip(one_sgd_step(stack, 3, X, Y, mode), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_modes_agree_where_a_component_has_one_loss():
    # local learning: every component's target is its own loss
    stack = mlp_stack(jax.random.key(7))
    x, y = batch(jax.random.key(8))
    only, _ = il.gradients(stack, x, y, 1, il.cross_entropy)
    for mode in ("sum", "mean"):
        got, _ = il.gradients(stack, x, y, 1, il.cross_entropy, mode=mode)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(only), strict=True):
            np.testing.assert_array_equal(g, w)
    # pairwise-sum: the last two components train on the true loss, component 3 plus its
    # own head; every head is trained (pairwise alone leaves head 1 as it is)
    pair, _ = il.gradients(stack, x, y, 2, il.cross_entropy)
    total, metrics = il.gradients(stack, x, y, 2, il.cross_entropy, mode="sum")
    np.testing.assert_array_equal(total.components[3].linear.weight,
                                  pair.components[3].linear.weight)
    assert np.isfinite(metrics.head_losses).all()
    assert np.any(np.asarray(total.heads[0].weight))


def test_global_matches_the_official_scalar_case():
    # logits' gradient 0.1: 0.6, 0.8, 1.2 for components 3, 2, 1 (official e2e test)
    stack = scales([[2.0], [3.0], [4.0]], [[1.0]] * 2)
    got = one_sgd_step(stack, 3, jnp.array([[1.0, 0.0]]), Y)
    np.testing.assert_allclose(np.concatenate(got), [0.8, 2.2, 3.4], rtol=1e-6)


def test_three_wise_matches_the_official_distance_two_case():
    # component 1 on head 3's loss through components 3 and 2; the others on the true loss
    stack = scales([[2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [5.0, 5.0]], [[1.0, 1.0]] * 3)
    got = one_sgd_step(stack, 3, X, Y)
    for g, want in zip(got, [[-4.0, 8.0], [-1.0, -1.0], [1.0, 1.0], [2.6, 2.6]], strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-6)


def mlp_stack(key, widths=(5, 7, 6, 7, 3), classes=3):
    keys = jax.random.split(key, 2 * len(widths))
    components = [Dense(a, b, k) for a, b, k in zip(widths[:-1], widths[1:], keys, strict=False)]
    heads = [eqx.nn.Linear(w, classes, key=k)
             for w, k in zip(widths[1:-1], keys[len(widths):], strict=False)]
    return Stack(components, heads)


def batch(key, size=8, features=5, classes=3):
    kx, ky = jax.random.split(key)
    return jax.random.normal(kx, (size, features)), jax.random.randint(ky, (size,), 0, classes)


def test_n_equal_to_components_is_global_backpropagation():
    stack = mlp_stack(jax.random.key(0))
    x, y = batch(jax.random.key(1))
    grads, metrics = il.gradients(stack, x, y, 4, il.cross_entropy)

    def full_loss(components):
        return il.cross_entropy(jax.vmap(Stack(components, stack.heads))(x), y)

    want = eqx.filter_grad(full_loss)(stack.components)
    for g, w in zip(jax.tree.leaves(grads.components), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    assert all(not np.any(np.asarray(h)) for h in jax.tree.leaves(grads.heads))  # unused
    assert np.isnan(metrics.head_losses).all()
    np.testing.assert_allclose(metrics.loss, full_loss(stack.components), rtol=1e-6)


def test_local_trains_each_component_on_its_own_head_with_its_input_detached():
    stack = mlp_stack(jax.random.key(2))
    x, y = batch(jax.random.key(3))
    grads, _ = il.gradients(stack, x, y, 1, il.cross_entropy)
    inputs = [x]
    for c in stack.components[:-1]:
        inputs.append(jax.vmap(c)(inputs[-1]))
    for k, component in enumerate(stack.components):
        read = stack.heads[k] if k < 3 else (lambda v: v)

        def own(c, k=k, read=read):
            return il.cross_entropy(jax.vmap(lambda v: read(c(v)))(inputs[k]), y)

        want = eqx.filter_grad(own)(component)
        for g, w in zip(jax.tree.leaves(grads.components[k]), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_heads_are_trained_on_detached_features_and_send_nothing_into_their_component():
    stack = mlp_stack(jax.random.key(4))
    x, y = batch(jax.random.key(5))
    grads, _ = il.gradients(stack, x, y, 2, il.cross_entropy)
    # pairwise: head 2 (index 1) is used (component 1 trains on it); head 1 is not
    assert not any(np.any(np.asarray(h)) for h in jax.tree.leaves(grads.heads[0]))
    # changing head 2's weights changes component 1's gradient (its target) but not
    # component 2's (its own head's input is detached; it trains on head 3 through 3)
    noise = jax.random.normal(jax.random.key(6), stack.heads[1].weight.shape)
    bumped = eqx.tree_at(lambda s: s.heads[1].weight, stack, stack.heads[1].weight + noise)
    other, _ = il.gradients(bumped, x, y, 2, il.cross_entropy)
    assert not np.allclose(grads.components[0].linear.weight, other.components[0].linear.weight)
    np.testing.assert_array_equal(grads.components[1].linear.weight,
                                  other.components[1].linear.weight)


def test_select_step_size_equals_plain_runs_per_step_size_and_picks_the_lowest():
    x, y = batch(jax.random.key(11))
    data = {"x": x, "y": y}

    def sample(d, key):
        return d["x"], d["y"]

    def evaluate(d, stack):
        return {"loss": il.cross_entropy(jax.vmap(stack)(d["x"]), d["y"])}

    keys = jax.random.split(jax.random.key(12), 2)
    grid = (0.0, 0.03, 0.003)
    got = il.select_step_size(mlp_stack, sample, evaluate, "loss", 2, grid, 4, data, keys,
                              il.cross_entropy, mode="sum")
    assert got.grid == grid and got.metric.shape == (3, 2)
    # step size 0 leaves each seed's initialisation as it is
    init_keys = jax.vmap(jax.random.split, out_axes=1)(keys)[0]
    np.testing.assert_allclose(got.metric[0], [evaluate(data, mlp_stack(k))["loss"]
                                               for k in init_keys], rtol=1e-6)
    # every other step size: the same seeds trained by make_train with optax.adam(lr)
    for i, lr in enumerate(grid[1:], 1):
        run, _, _, _ = il.make_train(mlp_stack, sample, evaluate, 2, optax.adam(lr),
                                     il.cross_entropy, None, 4, "sum")
        np.testing.assert_allclose(got.metric[i], run(data, keys, 4).evaluation["loss"][:, -1],
                                   rtol=1e-5)
    assert got.best == grid[int(np.argmin(got.metric.mean(1)))] and got.best > 0


def test_targets_and_named_rules():
    assert il.targets(4, 1) == (0, 1, 2, 3)
    assert il.targets(4, 2) == (1, 2, 3, 3)
    assert il.targets(4, 3) == (2, 3, 3, 3)
    assert il.targets(4, 4) == (3, 3, 3, 3)
    assert [il.rule_n(r, 4) for r in il.RULES] == [4, 1, 2, 3]
    assert il.trained_on(4, 2, "sum") == ((0, 1), (1, 2), (2, 3), (3,))
    assert il.trained_on(4, 2, "mean") == il.trained_on(4, 2, "sum")
    assert il.trained_on(4, 2) == ((1,), (2,), (3,), (3,))
    assert il.parse_rule("pairwise", 4) == (2, "only")
    assert il.parse_rule("pairwise-sum", 4) == (2, "sum")
    assert il.parse_rule("3-wise-mean", 4) == (3, "mean")
    with pytest.raises(ValueError, match="^unknown rule 'pairwise-max'; use global"):
        il.parse_rule("pairwise-max", 4)
    with pytest.raises(ValueError, match="^unknown mode 'max'; choose from only, sum, mean$"):
        il.make_step(optax.sgd(1.0), 2, il.cross_entropy, mode="max")


@pytest.mark.parametrize("n, message", [
    (0, "n = 0 is outside 1 ... 4 (the number of components)"),
    (5, "n = 5 is outside 1 ... 4 (the number of components)"),
])
def test_bad_n_is_refused_in_one_line(n, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
                       ) as error:
        il.check(mlp_stack(jax.random.key(0)), jnp.zeros(5), n)
    assert "\n" not in str(error.value)


def test_one_component_and_mismatched_heads_are_refused_before_compiling():
    stack = mlp_stack(jax.random.key(0))
    with pytest.raises(ValueError, match="^a model of 1 component cannot be trained in parts"):
        il.check(Stack(stack.components[:1], []), jnp.zeros(5), 1)
    with pytest.raises(ValueError, match="^2 heads do not match 4 components"):
        il.check(Stack(stack.components, stack.heads[:2]), jnp.zeros(5), 2)
    with pytest.raises(ValueError, match="^2 heads do not match 4 components"):  # tracing
        il.make_step(optax.sgd(1.0), 2, il.cross_entropy)(
            Stack(stack.components, stack.heads[:2]), None, jnp.zeros((1, 5)), jnp.zeros(1))
    wrong = eqx.tree_at(lambda s: s.heads[1], stack, eqx.nn.Linear(4, 3, key=jax.random.key(9)))
    with pytest.raises(ValueError, match=r"^head 2 does not take component 2's output \(6,\)"
                       ) as error:
        il.check(wrong, jnp.zeros(5), 2)
    assert "\n" not in str(error.value)


def test_resnet_and_transformer_stacks_pass_their_checks():
    images = resnet(4, 4, key=jax.random.key(0))
    il.check(images, jnp.zeros((28, 28, 1)), 2)
    assert jax.eval_shape(images, jnp.zeros((28, 28, 1))).shape == (10,)
    text = char_transformer(20, hidden=16, heads=2, length=8, key=jax.random.key(0))
    il.check(text, jnp.zeros(8, jnp.int32), 3)
    assert jax.eval_shape(text, jnp.zeros(8, jnp.int32)).shape == (8, 20)


def test_char_transformer_parameter_counts_by_hand():
    vocab, h, length = 20, 16, 8
    # a block: two LayerNorms 2 x 2h, the fused qkv 3h x h + 3h, the output h x h + h, the
    # MLP 4h x h + 4h and h x 4h + h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
    readout = 2 * h + h * vocab + vocab  # LayerNorm, then the linear read-out
    for head_blocks in (0, 1, 2):
        stack = char_transformer(vocab, hidden=h, heads=2, length=length,
                                 head_blocks=head_blocks, key=jax.random.key(0))
        counts = parameter_counts(stack)
        assert counts["components"] == [vocab * h + length * h + block, block, block,
                                        block + readout]
        assert counts["heads"] == [head_blocks * block + readout] * 3
        shapes = jax.eval_shape(lambda k, b=head_blocks: char_transformer(
            vocab, hidden=h, heads=2, length=length, head_blocks=b, key=k), jax.random.key(0))
        assert parameter_counts(shapes) == counts
    with pytest.raises(ValueError, match="^head_blocks must be at least 0, got -1$"):
        char_transformer(vocab, hidden=h, heads=2, length=length, head_blocks=-1,
                         key=jax.random.key(0))


def test_block_heads_are_causal_and_zero_blocks_keep_the_read_out_head():
    plain = char_transformer(20, hidden=16, heads=2, length=8, key=jax.random.key(3))
    blocks = char_transformer(20, hidden=16, heads=2, length=8, head_blocks=1,
                              key=jax.random.key(3))
    assert all(isinstance(head, ReadOut) for head in plain.heads)
    assert all(isinstance(head, BlockHead) for head in blocks.heads)
    # the components are the same with or without head blocks
    for a, b in zip(jax.tree.leaves(plain.components), jax.tree.leaves(blocks.components),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    il.check(blocks, jnp.zeros(8, jnp.int32), 2)
    h = jax.random.normal(jax.random.key(4), (8, 16))
    # a later position cannot change an earlier prediction (a random change: LayerNorm
    # removes a constant shift)
    changed = h.at[5].add(jax.random.normal(jax.random.key(5), (16,)))
    head = blocks.heads[0]
    np.testing.assert_allclose(head(h)[:5], head(changed)[:5], rtol=1e-6, atol=1e-6)
    assert not np.allclose(head(h)[5], head(changed)[5])


# the schedule model ------------------------------------------------------------------------

def unit_times(components, **override):
    ones = [1.0] * components
    values = {"forward": ones, "head": ones, "input": ones, "params": ones, "full": ones,
              "update": [0.0] * components} | override
    return schedule.Times(**values)


def test_schedule_two_devices_by_hand():
    # local: each device runs forward, head, params back to back: 3 per batch
    local = schedule.simulate(2, 1, unit_times(2), 6)
    assert local.time_per_batch == 3.0
    got = {(e.batch, e.op.component, e.op.label): (e.start, e.end) for e in local.events}
    assert got[0, 1, "forward"] == (1.0, 2.0)  # waits for device 0's activations
    assert got[1, 0, "forward"] == (3.0, 4.0)
    # global: device 0 waits for the cotangent from device 1: forward 1, forward 2, loss,
    # full pull-back, then device 0's params: the next batch starts at 5
    full = schedule.simulate(2, 2, unit_times(2), 6)
    got = {(e.batch, e.op.component, e.op.label): (e.start, e.end) for e in full.events}
    assert [o.label for o in schedule.plan(2, 2)[0]] == ["forward", "params:1", "update"]
    assert got[0, 1, "full:1"] == (3.0, 4.0)
    assert got[0, 0, "params:1"] == (4.0, 5.0)
    assert got[1, 0, "forward"] == (5.0, 6.0)
    assert full.time_per_batch == 5.0


def test_schedule_four_devices_pairwise_by_hand():
    # forward 1, head 0.5, input 2, params 1.5, full 3, update 0.25 on every device
    times = unit_times(4, head=[0.5] * 4, input=[2.0] * 4, params=[1.5] * 4, full=[3.0] * 4,
                       update=[0.25] * 4)
    assert [[o.label for o in d] for d in schedule.plan(4, 2)] == [
        ["forward", "params:1", "update"],
        ["forward", "head:1", "input:1", "params:2", "update"],
        ["forward", "head:2", "input:2", "params:3", "update"],
        ["forward", "head:3", "full:3", "update"]]
    timeline = schedule.simulate(4, 2, times, 8)
    got = {(e.batch, e.op.component, e.op.label): (e.start, e.end) for e in timeline.events}
    # batch 0: forwards end at 1, 2, 3, 4; device 1: head 2-2.5, input 2.5-4.5
    assert got[0, 1, "input:1"] == (2.5, 4.5)
    assert got[0, 0, "params:1"] == (4.5, 6.0)  # waits for device 1's message
    # device 2 waits for device 3 (forward 3-4, loss 4-4.5, full 4.5-7.5)
    assert got[0, 2, "params:3"] == (7.5, 9.0)
    # device 0's period: forward 1 + wait for device 1 (forward 1, head 0.5, input 2)
    # + params 1.5 + update 0.25 = 6.25
    assert got[1, 0, "forward"] == (6.25, 7.25)
    # the slowest cycle paces the pipeline: device 2's forward, device 3's forward, loss and
    # full pull-back, device 2's params and update: 1 + 1 + 0.5 + 3 + 1.5 + 0.25
    assert timeline.time_per_batch == 7.25


def test_schedule_plan_of_pairwise_sum_adds_each_components_own_head():
    assert [[o.label for o in d] for d in schedule.plan(4, 2, "sum")] == [
        ["forward", "head:0", "params:0", "params:1", "update"],
        ["forward", "head:1", "full:1", "params:2", "update"],
        ["forward", "head:2", "full:2", "params:3", "update"],
        ["forward", "head:3", "full:3", "update"]]
    assert schedule.plan(4, 2, "mean") == schedule.plan(4, 2, "sum")
    assert schedule.plan(4, 1, "sum") == schedule.plan(4, 1)  # local: one loss each
    # unit op times: device 0 runs forward, head, params, params, update = 4 a batch alone,
    # one more than pairwise alone (head:0 and params:0 replace nothing)
    times = unit_times(4)
    assert (schedule.summary(4, 2, times, mode="sum")["serial"]
            == schedule.summary(4, 2, times)["serial"] + 2)


def test_schedule_orders_rules_by_how_far_they_wait():
    times = unit_times(4, input=[2.0] * 4, params=[2.0] * 4, full=[3.0] * 4)
    per_batch = [schedule.summary(4, n, times)["time_per_batch"] for n in (1, 2, 3, 4)]
    assert per_batch == sorted(per_batch) and per_batch[0] < per_batch[-1]
    assert schedule.summary(4, 1, times)["time_per_batch"] == 1 + 1 + 2  # forward, head, params


PIPELINE_SCRIPT = """
import json
import equinox as eqx, jax, jax.numpy as jnp, numpy as np, optax
from lab.models.interlocking import Stack
from lab.parallel import interlocking as schedule
from lab.parallel.interlocking_devices import run_pipeline
from lab.train import interlocking as il
from tests.test_interlocking import mlp_stack, batch

facts = {}
optimizer = optax.adam(0.01)
batches = [tuple(np.asarray(a) for a in batch(jax.random.key(10 + b))) for b in range(5)]
for n, mode in ((1, "only"), (2, "only"), (3, "only"), (4, "only"), (2, "sum"), (3, "mean")):
    stack = mlp_stack(jax.random.key(0))
    step = il.make_step(optimizer, n, il.cross_entropy, mode=mode)
    state = optimizer.init(eqx.filter(stack, eqx.is_inexact_array))
    want = stack
    for x, y in batches:
        want, state, _ = step(want, state, x, y)
    got, timeline = run_pipeline(stack, n, batches, il.cross_entropy, None, optimizer,
                                 mode=mode)
    error = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
        jax.tree.leaves(eqx.filter(got, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(want, eqx.is_inexact_array))))
    devices = sorted({str(e.op.component) for e in timeline.events})
    # the schedule model replays the measured durations: no op may start later than it did
    durations = {(e.batch, e.op.component, e.op.label): e.end - e.start for e in timeline.events}
    zero = schedule.Times(*([[0.0] * 4] * 6))
    replay = schedule.simulate(4, n, zero, len(batches), durations, mode).starts()
    late = max(replay[key] - start for key, start in timeline.starts().items())
    facts[f"{n} {mode}"] = {"error": error, "events": len(timeline.events), "late": late,
                "per_device": [sum(1 for e in timeline.events if e.op.component == k)
                               for k in range(4)]}
print(json.dumps(facts))
"""


def test_pipeline_on_four_devices_equals_the_jitted_steps_and_the_model_replays_it():
    facts = json.loads(run(PIPELINE_SCRIPT, devices=4).splitlines()[-1])
    assert len(facts) == 6
    for key, fact in facts.items():
        n, mode = key.split()
        assert fact["error"] < 1e-5, facts
        plan = schedule.plan(4, int(n), mode)
        assert fact["per_device"] == [5 * len(d) for d in plan]
        assert fact["late"] <= 1e-9, facts  # the model's dependencies are the real ones
