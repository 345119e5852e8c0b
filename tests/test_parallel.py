"""``lab.parallel`` on 8 simulated CPU devices and across 2 processes.

Every check runs in a fresh python that sees N simulated devices (``tests/devices.py``).
Each script is
``PRELUDE`` (a small MLP classifier trained with Adam) followed by the test's asserts.
"""

import json
import socket
import textwrap

import numpy as np

from tests.devices import finish
from tests.devices import run as devices_run

PRELUDE = """
import equinox as eqx
import jax
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from lab import parallel
from lab.models.feedforward import mlp
from lab.train.supervised import batch_loss

optimizer = optax.adam(1e-2)


def step(model, opt_state, batch):
    grads, metrics = eqx.filter_grad(batch_loss, has_aux=True)(model, *batch)
    updates, opt_state = optimizer.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, metrics


def problem(rows=16):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 6)).astype(np.float32)
    y = rng.integers(0, 3, rows).astype(np.int32)
    return mlp([6, 32, 32, 3], key=jax.random.key(0)), (x, y)


def train(mesh, batch, steps=3):
    model, _ = problem()
    model = parallel.shard_params(model, mesh)
    opt_state = parallel.shard_params(optimizer.init(eqx.filter(model, eqx.is_array)), mesh)
    train_step, batch = parallel.data_parallel(step, mesh), parallel.shard_batch(batch, mesh)
    for _ in range(steps):
        model, opt_state, metrics = train_step(model, opt_state, batch)
    return model, opt_state, metrics, batch


def train_single(steps=3):
    model, batch = problem()
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    single_step = eqx.filter_jit(step)
    for _ in range(steps):
        model, opt_state, metrics = single_step(model, opt_state, batch)
    return model


def arrays(tree):
    return jax.tree.leaves(eqx.filter(tree, eqx.is_array))


def assert_close(a, b):
    for x, y in zip(arrays(a), arrays(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
"""


def run(body: str, devices: int, *args: str, wait: bool = True):
    """``PRELUDE + body`` in a new python that sees ``devices`` CPU devices."""
    return devices_run(PRELUDE + textwrap.dedent(body), devices, *args, wait=wait)


def test_data_parallel_step_matches_single_device():
    run("""
        mesh = parallel.mesh()
        assert mesh.shape == {"data": 8, "model": 1}
        model, opt_state, metrics, (x, y) = train(mesh, problem()[1])
        assert x.sharding.spec == P("data") and len(x.addressable_shards) == 8
        assert {s.data.shape for s in x.addressable_shards} == {(2, 6)}
        assert {s.data.shape for s in y.addressable_shards} == {(2,)}
        for leaf in arrays((model, opt_state, metrics)):
            assert leaf.sharding.is_fully_replicated, leaf.sharding
        assert_close(model, train_single())
    """, devices=8)


def test_model_parallel_step_matches_single_device():
    run("""
        mesh = parallel.mesh(model=4)
        assert mesh.shape == {"data": 2, "model": 4}
        model, opt_state, metrics, (x, _) = train(mesh, problem()[1])
        assert {s.data.shape for s in x.addressable_shards} == {(8, 6)}
        first, hidden, last = model.layers[1], model.layers[3], model.layers[5]
        for weight in (first.weight, hidden.weight, opt_state[0].mu.layers[3].weight):
            assert weight.sharding.spec == P("model"), weight.sharding
            assert {s.data.shape[0] for s in weight.addressable_shards} == {32 // 4}
        # (3, 32): the larger, input axis is split (row parallel); its bias is replicated
        assert last.weight.sharding.spec == P(None, "model"), last.weight.sharding
        assert last.bias.sharding.is_fully_replicated
        assert_close(model, train_single())
    """, devices=8)


def test_mesh_and_batch_errors_say_what_to_change():
    run("""
        from jax._src import xla_bridge
        # before any jax work (the runner checking a notebook's parameters) the devices are
        # counted in a child process, so this process holds no device memory
        parallel.check_devices(8, model=2, seeds=4)
        assert not xla_bridge.backends_are_initialized()
        try:
            parallel.check_devices(9)
            raise AssertionError("check_devices(9) on 8 devices did not raise")
        except ValueError as error:
            assert "9 devices but there are 8" in str(error), error
        try:
            parallel.mesh(16)
            raise AssertionError("mesh(16) on 8 devices did not raise")
        except ValueError as error:
            assert "16 devices but there are 8" in str(error), error
            assert "xla_force_host_platform_device_count" in str(error), error
        try:
            parallel.shard_batch(problem(rows=8)[1], parallel.mesh(3))
            raise AssertionError("a batch of 8 on 3 devices did not raise")
        except ValueError as error:
            assert "batch of 8 does not divide over 3" in str(error), error
        for call, message in [
                (lambda: parallel.check_devices(0), "devices must be at least 1, got 0"),
                (lambda: parallel.check_devices(8, model=3), "model axis (3) must divide"),
                (lambda: parallel.check_devices(8, model=2, seeds=6),
                 "seeds 6 does not divide over 4 data devices")]:
            try:
                call()
                raise AssertionError(f"no error: {message}")
            except ValueError as error:
                assert message in str(error), error
        parallel.check_devices(8, model=2, batch_size=100)
    """, devices=8)


MULTI_HOST = """
import sys
processes, index, port = (int(a) for a in sys.argv[1:])
if processes > 1:
    parallel.initialize_distributed(f"127.0.0.1:{port}", processes, index)
mesh = parallel.mesh()
assert mesh.shape["data"] == 4 and jax.process_count() == processes
x, y = problem()[1]
rows = len(x) // processes  # each process feeds its own block of the global batch
own = slice(index * rows, (index + 1) * rows)
model, _, metrics, _ = train(mesh, (x[own], y[own]))
flat = np.concatenate([np.ravel(a) for a in arrays(model)])  # replicated: readable anywhere
print(json.dumps([float(metrics.loss)] + flat.tolist()))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one_process_of_four_devices():
    script = "import json\n" + MULTI_HOST
    port = str(free_port())
    hosts = [run(script, 2, "2", str(i), port, wait=False) for i in range(2)]
    single = json.loads(run(script, 4, "1", "0", port).splitlines()[-1])
    first, second = (json.loads(finish(p).splitlines()[-1]) for p in hosts)
    assert first == second
    np.testing.assert_allclose(first, single, rtol=1e-5, atol=1e-6)
