"""VS-ML meta-training split over 8 simulated CPU devices (``lab.parallel``).

All sharded checks run in one fresh python that sees 8 devices (``tests/devices.py``): a
tiny two-layer VS-ML network meta-trained for 3 iterations by ES (population 16) and by
meta-gradients (8 tasks), on one device and on the 8. ``configure``'s checks of
``devices`` need no second device and run here."""

import pytest

from lab import parallel
from lab.experiments import vsml as experiment
from tests.devices import run
from tests.test_vsml_experiment import DEFAULTS

SCRIPT = """
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab import parallel
from lab.data import TaskSource, load
from lab.models import VSMLNetwork
from lab.train import vsml

x, y = load("iris")
source = TaskSource(x, y, inputs=4, classes=2, steps=3)
# a hidden layer, so that every parameter has a gradient (with one layer the shared
# output bias shifts all logits alike: its gradient is rounding noise, which Adam amplifies)
net = VSMLNetwork((4, 2, 2), ticks=1, state_size=4, message_size=2, key=jax.random.key(0))
key, mesh = jax.random.key(1), parallel.mesh(8)


def arrays(tree):
    return jax.tree.leaves(eqx.filter(tree, eqx.is_array))


es = vsml.MetaConfig(method="es", iterations=3, tasks=2, lr=0.02, population=16)
gradient = vsml.MetaConfig(method="gradient", iterations=3, tasks=8, lr=0.01)
for config in (es, gradient):
    single, (losses, accuracies) = vsml.make_meta_train(config, source)(net, key)
    sharded, (losses8, accuracies8) = vsml.make_meta_train(config, source, mesh)(net, key)
    np.testing.assert_allclose(losses8, losses, rtol=1e-5)
    np.testing.assert_allclose(accuracies8, accuracies, rtol=1e-5)  # NaN for ES: equal
    for start, a, b in zip(arrays(net), arrays(single), arrays(sharded), strict=True):
        assert not np.allclose(a, start)  # theta did move
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert b.sharding.is_fully_replicated and len(b.addressable_shards) == 8


def per_device_program(config):  # the partitioned HLO that ran above, from the jit cache
    chunk = vsml.MetaConfig(**{**config.__dict__, "iterations": 1})
    opt_state = vsml.meta_optimizer(chunk).init(eqx.filter(net, eqx.is_array))
    return vsml.meta_iterations.lower(chunk, source, net, opt_state, key, jnp.asarray(0), 3,
                                  mesh).compile().compiled.as_text()


# each device evaluates 16 / 8 = 2 members of the ES population: the first layer's state
# (members, tasks, inputs, outputs, state) has 2 rows there, never 16; with meta-gradients
# each device runs 8 / 8 = 1 task: (tasks, inputs, outputs, state) has 1 row, never 8
hlo = per_device_program(es)
assert set(re.findall(r"f32\\[(\\d+),2,4,2,4\\]", hlo)) == {"2"} and "all-reduce" in hlo
hlo = per_device_program(gradient)
assert set(re.findall(r"f32\\[(\\d+),4,2,4\\]", hlo)) == {"1"} and "all-reduce" in hlo

try:
    vsml.make_meta_train(vsml.MetaConfig(method="es", population=12), source, mesh)
    raise AssertionError("population 12 accepted on 8 devices")
except ValueError as error:
    assert "population 12 does not divide over 8 data devices" in str(error), error

print("ok")
"""


def test_vsml_meta_training_on_8_devices_matches_one_device():
    assert run(SCRIPT, 8).strip().endswith("ok")


def test_vsml_configure_devices_on_one_device():
    assert experiment.configure(**DEFAULTS).mesh() is None  # devices 1: no sharding at all
    with pytest.raises(ValueError, match="asked for 2 devices but there are 1"):
        experiment.configure(**DEFAULTS | {"devices": 2})
    with pytest.raises(ValueError, match="devices must be at least 1"):
        experiment.configure(**DEFAULTS | {"devices": 0})


def test_vsml_configure_checks_what_is_split(monkeypatch):
    """The ES population, or both learners' batches of tasks, must divide over the devices
    (``parallel.check_devices``'s messages are tested in ``tests/test_parallel.py``)."""
    checked = []
    monkeypatch.setattr(parallel, "check_devices",
                        lambda devices, **sizes: checked.append((devices, sizes)))
    setup = experiment.configure(**DEFAULTS | {"method": "es", "population": 12, "devices": 8})
    experiment.configure(**DEFAULTS | {"tasks_per_batch": 4, "devices": 8})
    assert checked == [(8, {"population": 12}),
                       (8, {"tasks_per_batch": 4, "meta_rnn_tasks_per_batch": 2})]
    assert setup.devices == 8
