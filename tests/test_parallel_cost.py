"""``lab.parallel.cost`` against hand-computed bytes, counts and flops.

The HLO parser is checked on a hand-written module (no devices). The programs themselves
are compiled in one fresh python that sees 8 simulated devices (``tests/devices.py``); it
prints what ``cost`` reads from each as JSON and the tests assert on that. Every sharded
array there is (32, 16) float32 split over 8 devices: (4, 16) per device, 256 bytes."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from lab.parallel import cost
from tests.devices import run

HLO = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[4,16]{1,0})->f32[4,16]{1,0}}, num_partitions=8

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=8 end_column=8}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%shift (p: f32[4,16]) -> f32[4,16] {
  %p = f32[4,16]{1,0} parameter(0)
  %cp-start = (f32[4,16]{1,0}, f32[4,16]{1,0}, u32[], u32[]) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, metadata={op_name="jit(step)/ppermute"}
  ROOT %cp-done = f32[4,16]{1,0} collective-permute-done(%cp-start)
}

%identity (q: f32[4,16]) -> f32[4,16] {
  ROOT %q = f32[4,16]{1,0} parameter(0)
}

%body (state: (s32[], f32[4,16])) -> (s32[], f32[4,16]) {
  %state = (s32[], f32[4,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %h = f32[4,16]{1,0} get-tuple-element(%state), index=1
  %shifted = f32[4,16]{1,0} call(%h), to_apply=%shift
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %out = (s32[], f32[4,16]{1,0}) tuple(%next, %shifted)
}

%cond (state.1: (s32[], f32[4,16])) -> pred[] {
  %state.1 = (s32[], f32[4,16]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%state.1), index=0
  %seven = s32[] constant(7)
  ROOT %lt = pred[] compare(%i.1, %seven), direction=LT
}

%body2 (s: (s32[], f32[4,16])) -> (s32[], f32[4,16]) {
  %s = (s32[], f32[4,16]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%s), index=0
  %v = f32[4,16]{1,0} get-tuple-element(%s), index=1
  %a2a = (f32[4,16]{1,0}, f32[4,16]{1,0}) all-to-all(%v, /*index=1*/%v), channel_id=5, replica_groups={{0,1}}
  %w = f32[4,16]{1,0} get-tuple-element(%a2a), index=0
  ROOT %s.out = (s32[], f32[4,16]{1,0}) tuple(%j, %w)
}

%wrapped_reduce_scatter (a: bf16[16,16]) -> bf16[2,16] {
  %a = bf16[16,16]{1,0} parameter(0)
  ROOT %rs = bf16[2,16]{1,0} reduce-scatter(%a), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
}

%never_called (z: f32[128]) -> f32[128] {
  %z = f32[128]{0} parameter(0)
  ROOT %dead = f32[128]{0} all-reduce(%z), replica_groups={}, to_apply=%add
}

ENTRY %main (x: f32[4,16], b: bf16[2,16], flag: s32[]) -> (f32[4,16], bf16[2,16]) {
  %x = f32[4,16]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}
  %b = bf16[2,16]{1,0} parameter(1)
  %flag = s32[] parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,16]{1,0}) tuple(%zero, %x)
  %loop = (s32[], f32[4,16]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"7"},"known_init_step":{"init":"0","step":"1"}}
  %h = f32[4,16]{1,0} get-tuple-element(%loop), index=1
  %pick = f32[4,16]{1,0} conditional(%flag, %h, %h), branch_computations={%shift, %identity}
  %ar-start = f32[4,16]{1,0} all-reduce-start(%pick), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %ar-done = f32[4,16]{1,0} all-reduce-done(%ar-start)
  %ag-start = (bf16[2,16]{1,0}, bf16[16,16]{1,0}) all-gather-start(bf16[2,16]{1,0} %b), channel_id=4, replica_groups=[1,8]<=[8], dimensions={0}
  %ag-done = bf16[16,16]{1,0} all-gather-done(%ag-start)
  %rs-start = ((bf16[16,16]{1,0}), bf16[2,16]{1,0}) async-start(%ag-done), calls=%wrapped_reduce_scatter
  %rs-done = bf16[2,16]{1,0} async-done(%rs-start), calls=%wrapped_reduce_scatter
  %init2 = (s32[], f32[4,16]{1,0}) tuple(%flag, %ar-done)
  %loop2 = (s32[], f32[4,16]{1,0}) while(%init2), condition=%cond, body=%body2
  %y = f32[4,16]{1,0} get-tuple-element(%loop2), index=1
  ROOT %result = (f32[4,16]{1,0}, bf16[2,16]{1,0}) tuple(%y, %rs-done)
}
"""  # noqa: E501 (HLO text as XLA prints it, one instruction a line)


def test_type_bytes_dtypes_tuples_and_dynamic_shapes():
    assert cost.type_bytes("f32[8,16]{1,0}") == 8 * 16 * 4
    assert cost.type_bytes("bf16[4]{0}") == cost.type_bytes("f16[4]") == 8
    assert cost.type_bytes("f64[2,2]") == 32
    assert cost.type_bytes("pred[3]") == 3
    assert cost.type_bytes("f8e4m3fn[10]") == 10
    assert cost.type_bytes("s4[5]") == 3  # packed nibbles, rounded up to whole bytes
    assert cost.type_bytes("(f32[8,16]{1,0}, f32[8,16]{1,0}, u32[], u32[])") == 2 * 512 + 8
    assert cost.type_bytes("f32[<=8,4]") == 128  # a dynamic dimension at its bound
    assert cost.type_bytes("token[]") == 0


def test_collectives_hand_written_hlo_counts_loops_calls_and_async_pairs():
    listed = cost.collectives(HLO)
    found = {c.kind: c for c in listed}
    # one of each kind: the never-called computation's all-reduce does not run
    assert len(listed) == len(found) == 5 and "collective-broadcast" not in found
    permute = found["collective-permute"]
    # 7 times through the loop's body, plus once as a branch of the conditional
    assert (permute.bytes, permute.count, permute.exact) == (256, 8, True)
    assert (permute.computation, permute.name) == ("shift", "cp-start")
    assert permute.source_target_pairs == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert permute.replica_groups == ""
    assert found["all-reduce"][1:3] == (256, 1)  # the start of an async pair, once
    assert found["all-reduce"].replica_groups == "{{0,1,2,3},{4,5,6,7}}"
    assert found["all-gather"][1:3] == (2 * 16 * 2, 1)  # bf16 operand typed in place
    assert found["all-gather"].replica_groups == "[1,8]<=[8]"
    scatter = found["reduce-scatter"]  # inside async-start's computation, not doubled by -done
    assert (scatter.bytes, scatter.count, scatter.computation) == (16 * 16 * 2, 1,
                                                                    "wrapped_reduce_scatter")
    exchange = found["all-to-all"]  # two operands; its loop has no known trip count
    assert (exchange.bytes, exchange.count, exchange.exact) == (2 * 256, 1, False)
    assert cost.summary(list(found.values()))["collective-permute"] == {"count": 8,
                                                                        "bytes": 8 * 256}


def test_collectives_without_entry_raises():
    with pytest.raises(ValueError, match="no ENTRY"):
        cost.collectives(HLO.replace("ENTRY %main", "%main"))


def test_groups_of_explicit_iota_and_mesh_replica_groups():
    assert cost.groups("{{0,1,2,3},{4,5,6,7}}", 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert cost.groups("{}", 4) == ((0, 1, 2, 3),)
    assert cost.groups("[1,8]<=[8]", 8) == (tuple(range(8)),)
    # arange(8) as (2, 4), transposed: the columns of a data x model mesh
    assert cost.groups("[4,2]<=[2,4]T(1,0)", 8) == ((0, 4), (1, 5), (2, 6), (3, 7))
    # a 2 x 1 x 4 mesh: the groups vary axis_0 and hold the others (the data axis)
    assert cost.groups("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}", 8) == (
        (0, 4), (1, 5), (2, 6), (3, 7))
    assert cost.groups("mesh['a'=2,'b'=4] {'b'}", 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    for bad in ("mesh['a'=2,'b'=4] {'c'}", "mesh['a'=2,'b'=4] {'a':(1)2}", "(0,1)"):
        with pytest.raises(ValueError, match="replica groups"):
            cost.groups(bad, 8)


def test_memory_and_flops_of_single_device_matmul():
    x, w = jnp.ones((16, 32)), jnp.ones((32, 8))
    compiled = jax.jit(jnp.matmul).lower(x, w).compile()
    memory = cost.memory(compiled)
    assert (memory.arguments, memory.outputs, memory.aliases) == ((16 * 32 + 32 * 8) * 4,
                                                                  16 * 8 * 4, 0)
    assert memory.total == memory.arguments + memory.outputs + memory.temporaries
    assert cost.flops(compiled) == 2 * 16 * 32 * 8
    assert cost.collectives(compiled) == []
    assert cost.flops(eqx.filter_jit(jnp.matmul).lower(x, w).compile()) == 2 * 16 * 32 * 8
    donated = cost.memory(jax.jit(lambda x: x + 1, donate_argnums=0).lower(x).compile())
    assert donated.aliases == donated.arguments == 16 * 32 * 4


SCRIPT = """
import json

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lab import parallel
from lab.parallel import cost

mesh = parallel.mesh()
ring = [(i, (i + 1) % 8) for i in range(8)]
shift = lambda x: lax.ppermute(x, "data", ring)
x = jnp.ones((32, 16))


def unrolled(x):
    for _ in range(7):
        x = shift(x)
    return x


def fori(x):
    return lax.fori_loop(0, 7, lambda i, x: shift(x), x)


def nested(x):  # 3 times (5 shifts in a scan, then a psum)
    scan = lambda x: lax.scan(lambda x, _: (shift(x), None), x, None, length=5)[0]
    return lax.fori_loop(0, 3, lambda i, x: lax.psum(scan(x), "data"), x)


def dynamic(x):  # the trip count is data: XLA cannot know it
    return lax.fori_loop(0, x[0, 0].astype(jnp.int32), lambda i, x: shift(x), x)


def psum(x):
    return lax.psum(x, "data")


def others(x):
    return (lax.all_gather(x, "data"),
            lax.psum_scatter(x, "data", scatter_dimension=1, tiled=True),
            lax.all_to_all(x, "data", 1, 1, tiled=True))


facts = {}
for f in (unrolled, fori, nested, dynamic, psum, others):
    program = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data"), out_specs=P("data"),
                                    check_vma=False))
    facts[f.__name__] = [c._asdict() for c in cost.collectives(program.lower(x).compile())]

# the partitioner's all-reduce: x's columns and w's rows split, the product replicated
x = jax.device_put(jnp.ones((32, 64)), NamedSharding(mesh, P(None, "data")))
w = jax.device_put(jnp.ones((64, 16)), NamedSharding(mesh, P("data")))
matmul = jax.jit(jnp.matmul, out_shardings=NamedSharding(mesh, P())).lower(x, w).compile()
facts["matmul"] = [c._asdict() for c in cost.collectives(matmul)]
facts["matmul_flops"] = cost.flops(matmul)

rows = jax.device_put(jnp.ones((8, 1024)), NamedSharding(mesh, P("data")))
double = jax.jit(lambda x: 2 * x, out_shardings=NamedSharding(mesh, P("data")))
facts["memory"] = cost.memory(double.lower(rows).compile())._asdict()
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads(run(SCRIPT, devices=8).splitlines()[-1])


def summary(found: list[dict]) -> dict:
    return cost.summary([cost.Collective(**c) for c in found])


def test_collectives_count_ppermute_ring_unrolled_and_in_loops(facts):
    ring = [[i, (i + 1) % 8] for i in range(8)]
    assert [(c["kind"], c["bytes"], c["count"]) for c in facts["unrolled"]] == \
        [("collective-permute", 256, 1)] * 7
    assert all(c["source_target_pairs"] == ring for c in facts["unrolled"])
    seven = {"collective-permute": {"count": 7, "bytes": 7 * 256}}
    assert summary(facts["fori"]) == seven
    # XLA keeps the loop (one instruction run 7 times); were it unrolled, 7 run once
    assert [c["count"] for c in facts["fori"]] in ([7], [1] * 7)
    assert summary(facts["nested"]) == {"collective-permute": {"count": 15, "bytes": 15 * 256},
                                        "all-reduce": {"count": 3, "bytes": 3 * 256}}
    assert all(c["exact"] for c in facts["unrolled"] + facts["fori"] + facts["nested"])
    assert [(c["count"], c["exact"]) for c in facts["dynamic"]] == [(1, False)]


def test_collectives_bytes_per_device_of_each_kind(facts):
    assert summary(facts["psum"]) == {"all-reduce": {"count": 1, "bytes": 4 * 16 * 4}}
    assert summary(facts["others"]) == {kind: {"count": 1, "bytes": 256} for kind in
                                        ("all-gather", "reduce-scatter", "all-to-all")}
    (reduce,) = facts["matmul"]
    assert (reduce["kind"], reduce["bytes"], reduce["count"]) == ("all-reduce", 32 * 16 * 4, 1)
    assert cost.groups(reduce["replica_groups"], 8) == (tuple(range(8)),)  # all of them


def test_memory_and_flops_are_per_device(facts):
    # (8, 1024) float32 over 8 devices: one row of 1024 each, in and out
    assert facts["memory"]["arguments"] == facts["memory"]["outputs"] == 1024 * 4
    # each device multiplies (32, 8) by (8, 16); summing the partial products adds at most
    # one flop per output element, far below the whole product's 2 * 32 * 64 * 16
    assert 2 * 32 * 8 * 16 <= facts["matmul_flops"] <= 2 * 32 * 8 * 16 + 32 * 16
