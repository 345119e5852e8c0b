"""Sequence parallelism (``lab.parallel.ring``, ``lab.train.sequence_parallel``) on 8
simulated CPU devices against its one-device twin.

Two fresh pythons that see 8 devices (``tests/devices.py``), each compiling its programs
once and printing what it measured as JSON for the tests to assert on:

- ``ATTENTION`` (float64 enabled): Ring Self-Attention and ring attention inside
  ``jax.shard_map`` over N = 1, 2, 4, 8 devices against ``full_attention`` on the whole
  sequence, outputs and the gradients with respect to q, k and v, in float32 and float64;
- ``TRAINING``: one Adam step of a small causal Transformer (2 layers, hidden 32, 4 heads) on
  the retrieval task with sequences of 512, sequence-parallel against the one-device step;
  the per-device temporaries of those compiled steps; the collectives of the compiled RSA
  forward; the error messages; notebook 09's measured programs compiled fast and optimised.
"""

import itertools
import json

import pytest

from tests.devices import run

ATTENTION = """
import itertools
import json

import jax

jax.config.update("jax_enable_x64", True)

from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from lab.models.transformer import full_attention
from lab.parallel.ring import ring_attention, ring_self_attention

LENGTH, HEADS, DIM = 32, 2, 4  # 4 positions per device on 8 devices
ATTENDS = {"rsa": ring_self_attention("seq"), "ring": ring_attention("seq")}


def values_and_gradients(attend, causal, q, k, v, cotangent):
    out, back = jax.vjp(lambda q, k, v: attend(q, k, v, causal), q, k, v)
    return [out, *back(cotangent)]


def sharded(attend, mesh):
    return lambda q, k, v, causal: jax.shard_map(
        lambda q, k, v: attend(q, k, v, causal), mesh=mesh, in_specs=P("seq"),
        out_specs=P("seq"))(q, k, v)


facts = {}
for dtype in ("float32", "float64"):
    inputs = [jax.random.normal(key, (LENGTH, HEADS, DIM), dtype)
              for key in jax.random.split(jax.random.key(0), 4)]  # q, k, v, cotangent
    reference = jax.jit(lambda *x: [values_and_gradients(full_attention, causal, *x)
                                    for causal in (False, True)])(*inputs)
    facts[dtype] = {"dtype": str(reference[0][0].dtype), "causal_changes": float(
        abs(reference[0][0] - reference[1][0]).max())}
    for n in (1, 2, 4, 8):
        mesh = jax.make_mesh((n,), ("seq",), axis_types=(AxisType.Auto,),
                             devices=jax.devices()[:n])
        results = jax.jit(lambda *x: {
            name: [values_and_gradients(sharded(attend, mesh), causal, *x)
                   for causal in (False, True)] for name, attend in ATTENDS.items()})(*inputs)
        for name, by_causal in results.items():
            for causal, (got, want) in enumerate(zip(by_causal, reference, strict=True)):
                facts[dtype][f"{name} N={n} causal={bool(causal)}"] = {
                    "dtype": str(got[0].dtype),
                    "errors": [float(abs(a - b).max()) for a, b in zip(got, want, strict=True)]}
print(json.dumps(facts))
"""

TRAINING = """
import itertools
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

from lab.data import retrieval
from lab.models.transformer import fuse_qkv, split_qkv
from lab.parallel import cost
from lab.parallel.ring import ring_self_attention
from lab.train.sequence_parallel import check_length, init, make_step, sequence_mesh

facts = {}
optimizer = optax.adam(1e-3)
# long enough that the (Z, L, L) scores dominate a step's temporaries, which are measured
# on the same compiled programs
task = retrieval.Retrieval(length=512, queries=16)
HEADS = 4
# causal and two layers: without a mask, attention is the same whatever order the keys and
# values arrive in (together), and with one layer the loss (at the questions, on the last
# device, which sees every earlier position) would be too; misplaced chunks would pass
model, opt_state = eqx.filter_jit(init)(task, optimizer, hidden=32, heads=HEADS, layers=2,
                                        causal=True, key=jax.random.key(0))
tokens, targets = eqx.filter_jit(retrieval.batch)(task, jax.random.key(1), 2)


def sharper(w):
    # the query rows of a fused qkv weight times 10: attention sharper than at initialisation
    # (scores of order 1 to 10, not 0.1), so that which keys meet which queries matters to
    # the loss, not only their mean
    q, k, v = split_qkv(w, HEADS)
    return fuse_qkv(10 * q, k, v, HEADS)


model = eqx.tree_at(lambda m: [block.attention.qkv.weight for block in m.blocks], model,
                    replace_fn=sharper)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def max_error(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(leaves(a), leaves(b), strict=True))


def qkv_biases(model):
    return [block.attention.qkv.bias for block in model.blocks]


def without_key_bias(b):
    q, k, v = split_qkv(b, HEADS)
    return fuse_qkv(q, jnp.zeros_like(k), v, HEADS)


def without_key_biases(model):
    # the key rows of the qkv biases have zero gradient in exact arithmetic (a constant
    # added to every key shifts each row of scores by a constant), so Adam's first step,
    # lr * g / (|g| + eps), turns their rounding noise (1e-8) into updates of up to lr; their
    # gradients are still compared, through Adam's first moment
    return eqx.tree_at(qkv_biases, model, replace_fn=without_key_bias)


def compiled(mesh, attention="rsa"):
    step = make_step(optimizer, mesh, attention)
    return step.lower(model, opt_state, tokens, targets).compile()


one = compiled(None)
one_model, one_state, one_metrics = one(model, opt_state, tokens, targets)
facts["one device"] = {"loss": float(one_metrics.loss), "accuracy": float(one_metrics.accuracy),
                       "temporaries": cost.memory(one).temporaries}
for attention, devices, data in [("rsa", 8, 1), ("ring", 8, 1), ("rsa", 8, 2), ("rsa", 1, 1),
                                 ("rsa", 2, 1), ("rsa", 4, 1), ("local", 8, 1)]:
    step = compiled(sequence_mesh(devices, data), attention)
    new, state, metrics = step(model, opt_state, tokens, targets)
    facts[f"{attention} {devices}/{data}"] = {
        "loss": float(metrics.loss), "accuracy": float(metrics.accuracy),
        "params": max_error(without_key_biases(new), without_key_biases(one_model)),
        # Adam's first moment after one step is (1 - b1) * gradient = 0.1 * gradient
        "gradient": max_error(state[0].mu, one_state[0].mu) / 0.1,
        "moved": max_error(without_key_biases(new), without_key_biases(model)),
        "temporaries": cost.memory(step).temporaries}


def forward(model, tokens):
    chunk = tokens.shape[1]
    positions = lax.axis_index("seq") * chunk + jnp.arange(chunk)
    return jax.vmap(lambda t: model(t, positions, ring_self_attention("seq")))(tokens)


program = eqx.filter_jit(jax.shard_map(forward, mesh=sequence_mesh(8),
                                       in_specs=(P(), P("data", "seq")),
                                       out_specs=P("data", "seq")))
facts["collectives"] = [c._asdict() for c in
                        cost.collectives(program.lower(model, tokens).compile())]


# notebook 09 reads its bytes from programs compiled at LLVM's level 0 (``measuring``):
# the same bytes and collectives as an optimised compile (level 3, the expensive passes on)
from lab.experiments import sequence_parallel as experiment

fast = experiment.measuring
sizes = dict(batch=2, length=64, hidden=32, heads=4, layers=1)
programs = {"sequence 4": lambda: experiment.model_step("sequence", 4, **sizes),
            "tensor 2": lambda: experiment.model_step("tensor", 2, **sizes),
            "mlp block sequence 2": lambda: experiment.block_step(
                "mlp", "sequence", 2, batch=2, length=64, hidden=32, heads=4),
            "one device blockwise": lambda: experiment.single_step(
                "blockwise", batch=1, length=64, hidden=32, heads=4, layers=1, block=32)}
facts["measuring"] = {}
for name, program in programs.items():
    found = []
    for options in (fast("cpu"), {"xla_backend_optimization_level": 3,
                                  "xla_llvm_disable_expensive_passes": False}):
        experiment.measuring = lambda platform, options=options: options
        compiled = program()
        found.append([list(cost.memory(compiled)),
                      [c._asdict() for c in cost.collectives(compiled)]])
    facts["measuring"][name] = found
experiment.measuring = fast


def message(fn, *args):
    try:
        fn(*args)
    except ValueError as error:
        return str(error)
    return None


facts["errors"] = {
    "too many devices": message(sequence_mesh, 16),
    "data not dividing": message(sequence_mesh, 8, 3),
    "length": message(check_length, 100, sequence_mesh(8)),
    "length fits": message(check_length, 96, sequence_mesh(8, 2)),
    "one device length": message(check_length, 101, None),
    "attention": message(make_step, optimizer, sequence_mesh(8), "nope"),
}
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def attention() -> dict:
    return json.loads(run(ATTENTION, devices=8).splitlines()[-1])


@pytest.fixture(scope="module")
def training() -> dict:
    return json.loads(run(TRAINING, devices=8).splitlines()[-1])


@pytest.mark.parametrize("dtype, atol", [("float32", 1e-5), ("float64", 1e-10)])
def test_ring_attentions_match_full_attention_values_and_gradients(attention, dtype, atol):
    facts = attention[dtype]
    assert facts.pop("dtype") == dtype
    assert facts.pop("causal_changes") > 0.1  # the causal and plain references differ
    cases = {f"{name} N={n} causal={causal}" for name in ("rsa", "ring") for n in (1, 2, 4, 8)
             for causal in (False, True)}
    assert set(facts) == cases
    for case, found in facts.items():
        assert found["dtype"] == dtype, case
        # output, then the gradients with respect to q, k and v
        assert max(found["errors"]) < atol, (case, found["errors"])


def test_sequence_parallel_step_matches_one_device_step(training):
    one = training["one device"]
    for case in ("rsa 8/1", "ring 8/1", "rsa 8/2"):
        found = training[case]
        assert abs(found["loss"] - one["loss"]) < 1e-5, case
        assert found["accuracy"] == one["accuracy"], case
        assert found["gradient"] < 1e-5, case
        assert found["params"] < 1e-5, case
        assert found["moved"] > 1e-4, case  # the step did move the parameters


def test_sequence_parallel_loss_does_not_depend_on_devices(training):
    one = training["one device"]["loss"]
    for case in ("rsa 1/1", "rsa 2/1", "rsa 4/1", "rsa 8/1"):
        assert abs(training[case]["loss"] - one) < 1e-5, case
        assert training[case]["gradient"] < 1e-5, case


def test_sequence_parallel_local_attention_cuts_other_chunks(training):
    # attention within each device's 64 positions only: another model function, another loss
    assert abs(training["local 8/1"]["loss"] - training["one device"]["loss"]) > 1e-3
    assert training["local 8/1"]["gradient"] > 1e-3


def test_notebook_09_bytes_are_the_same_compiled_fast_as_optimised(training):
    for name, (fast, optimised) in training["measuring"].items():
        assert fast == optimised, name
        assert fast[0][2] > 0, name  # temporaries measured
    # the sharded programs do communicate: their collectives are compared, not two empty lists
    assert training["measuring"]["sequence 4"][0][1] and training["measuring"]["tensor 2"][0][1]


def test_ring_self_attention_forward_two_rings_per_layer_no_all_gather(training):
    layers, n, batch, chunk, hidden = 2, 8, 2, 512 // 8, 32
    found = training["collectives"]
    assert {c["kind"] for c in found} == {"collective-permute"}  # no all-gather, no psum
    # per layer: keys round the ring (N - 1 hops), then values (N - 1 hops)
    assert sum(c["count"] for c in found) == layers * 2 * (n - 1)
    ring = [[j, (j + 1) % n] for j in range(n)]
    for c in found:
        assert c["source_target_pairs"] == ring
        assert c["bytes"] == batch * chunk * hidden * 4  # (B, c, Z, A) float32 per device
        assert c["exact"]


def test_sequence_parallel_step_temporaries_shrink_with_devices(training):
    one = training["one device"]["temporaries"]
    # the one-device step holds (B, Z, L, L) scores: 2 x 4 heads x 512^2 x 4 bytes = 8 MiB
    assert one >= 2 * 4 * 512**2 * 4
    by_devices = [training[f"rsa {n}/1"]["temporaries"] for n in (1, 2, 4, 8)]
    print("rsa temporaries, N = 1, 2, 4, 8:", by_devices, "one device:", one)
    assert all(more > less for more, less in itertools.pairwise(by_devices))
    for name in ("rsa 8/1", "ring 8/1"):
        ratio = training[name]["temporaries"] / one
        print(f"{name}: {ratio:.3f} of the one-device step's temporaries")
        assert ratio <= 0.2, (name, ratio)
    # ring attention never holds a (c, L) block of scores: less than RSA's
    assert training["ring 8/1"]["temporaries"] < training["rsa 8/1"]["temporaries"]


def test_sequence_mesh_check_length_and_make_step_errors(training):
    errors = training["errors"]
    message = errors["too many devices"]
    assert "16" in message and "8" in message and "XLA_FLAGS" in message
    assert "\n" not in message
    assert "data axis (3)" in errors["data not dividing"]
    assert "sequence length 100" in errors["length"] and "8" in errors["length"]
    assert errors["length fits"] is None and errors["one device length"] is None
    assert "'nope'" in errors["attention"] and "rsa" in errors["attention"]
