"""ProxProp training sharded over 8 simulated CPU devices (``lab.parallel``).

One fresh python with 8 devices trains twice, data-parallel (exact solver) and on a
2 x 4 data x model grid (cg3), checks the layouts it sees, saves its results and checks
``configure``'s errors there; the pytest process meanwhile trains the same runs without a
mesh and compares.
"""

import jax
import numpy as np
import pytest

from lab.data import load
from lab.experiments.proxprop import configure
from lab.train.proxprop import ProxPropConfig, make_epochs
from tests.devices import finish
from tests.devices import run as devices_run

# Data parallel: each minibatch of 32 split 8 ways, the model replicated. Model parallel:
# 2 x 4, the 64-wide layer's (64, 64) weight split over "model" along its output axis.
DATA_PARALLEL = ProxPropConfig(hidden=(32,), solver="exact", epochs=2, batch_size=32)
MODEL_PARALLEL = ProxPropConfig(hidden=(64,), solver="cg3", epochs=2, batch_size=32)
LR = 0.5

SCRIPT = """
import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import lab.train.proxprop as proxprop
import tests.test_parallel_proxprop as shared
from lab import parallel
from lab.experiments.proxprop import configure

seen = {}  # the layouts the training step and the evaluation compute with
value_and_direction, cross_entropy = proxprop.value_and_direction, proxprop.cross_entropy


def note(name, x):
    jax.debug.inspect_array_sharding(x, callback=lambda s: seen.setdefault(name, (s, x.shape)))


def spy_step(model, x, y, loss_fn, prox):
    note("minibatch", x)
    note("first weight", model.layers[1].weight)
    note("last weight", model.layers[3].weight)
    return value_and_direction(model, x, y, loss_fn, prox)


def spy_evaluation(logits, labels):
    note("evaluation logits", logits)
    return cross_entropy(logits, labels)


proxprop.value_and_direction, proxprop.cross_entropy = spy_step, spy_evaluation


def layout(name):
    sharding, shape = seen.pop(name)
    return sharding.spec, sharding.shard_shape(shape)


data = shared.data()
state, curves = shared.train_epochs(shared.DATA_PARALLEL, data, parallel.mesh(8))
assert layout("minibatch") == (P("data"), (4, 64))  # 32 rows over 8 devices
assert layout("first weight") == (P(), (32, 64)) and layout("last weight") == (P(), (10, 32))
assert layout("evaluation logits") == (P("data"), (32, 10))  # 256 training rows, 32 each
for leaf in jax.tree.leaves(state):
    assert leaf.sharding.is_fully_replicated, leaf.sharding

mesh = parallel.mesh(8, model=4)
assert mesh.shape == {"data": 2, "model": 4}
split_state, split_curves = shared.train_epochs(shared.MODEL_PARALLEL, data, mesh)
assert layout("minibatch") == (P("data"), (16, 64))  # 32 rows over 2 data devices
assert layout("first weight") == (P("model"), (16, 64))  # 64 outputs over 4
assert layout("last weight") == (P(None, "model"), (10, 16))  # 64 inputs over 4
params, (momentum, _) = split_state
for weight in (params.layers[1].weight, momentum.trace.layers[1].weight):
    assert {s.data.shape for s in weight.addressable_shards} == {(16, 64)}, weight.sharding
assert params.layers[3].weight.sharding.spec == P(None, "model")
assert params.layers[1].bias.sharding.is_fully_replicated
np.savez(sys.argv[1], *jax.tree.leaves((state, curves, split_state, split_curves)))

for change, message in (({"devices": 8}, "batch_size 10 does not divide over 8 data devices"),
                        ({"devices": 16}, "asked for 16 devices but there are 8")):
    try:
        configure(**shared.SETUP | change)
        raise AssertionError(f"configure with {change} did not raise")
    except ValueError as error:
        assert message in str(error), error
assert configure(**shared.SETUP | {"devices": 8, "model_devices": 4}).mesh().shape == {
    "data": 2, "model": 4}  # a batch of 10 divides over 2 data devices
print("ok")
"""


def data():
    """Digits, 256 training and 64 validation rows: both divide over 8 devices."""
    x, y = load("digits", "train")
    return x[:256], y[:256], x[256:320], y[256:320]


def train_epochs(config, data, mesh):
    """The trained ``(params, opt_state)`` and the curves after each epoch: ``make_train``
    with the state returned."""
    epochs = make_epochs(config, *data, mesh=mesh)

    @jax.jit
    def train(key):
        state, first = epochs.init(key, LR)
        keys = jax.random.split(key, config.epochs)
        return jax.lax.scan(lambda state, key: epochs.epoch(state, LR, key), state, keys)

    return train(jax.random.key(1))


def test_proxprop_sharded_training_matches_one_device_and_shards_the_batch(tmp_path):
    out = tmp_path / "sharded.npz"
    process = devices_run(SCRIPT, 8, str(out), wait=False)
    state, curves = train_epochs(DATA_PARALLEL, data(), None)
    split_state, split_curves = train_epochs(MODEL_PARALLEL, data(), None)
    assert "ok" in finish(process)
    sharded = np.load(out)
    expected = jax.tree.leaves((state, curves, split_state, split_curves))
    assert len(sharded.files) == len(expected)
    for i, want in enumerate(expected):
        got, want = sharded[f"arr_{i}"], np.asarray(want)
        # a sum over 32 rows split 8 ways rounds differently: relative to each array's scale
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    for c in (curves, split_curves):
        assert c.train_loss[-1] < c.train_loss[0]  # it did train


SETUP = dict(preset="default", dataset="digits", arch="mlp", hidden=[8], solver="exact",
             optimizer="nesterov", lr=1.0, backprop_lr=0.05, tau=0.05, epochs=2,
             batch_size=10, seeds=1, lr_grid=[0.1])


@pytest.mark.parametrize("change, message", [
    ({"devices": 2}, "asked for 2 devices but there are 1 (cpu); on CPU, simulate more"),
    ({"devices": 0}, "devices must be at least 1, got 0"),
    ({"model_devices": 2}, "the model axis (2) must divide the 1 devices"),
])
def test_configure_refuses_devices_it_cannot_lay_out(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        configure(**SETUP | change)


def test_configure_carries_devices_into_the_setup():
    setup = configure(**SETUP)
    assert (setup.devices, setup.model_devices) == (1, 1)
    assert setup.mesh() is None
