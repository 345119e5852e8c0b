"""The SAC-AE update data-parallel (and model-parallel) on 8 simulated CPU devices.

The sharded checks run in one fresh python that sees 8 devices (``tests/devices.py``): the
first update (critic, actor, temperature, targets and decoder all run at step 0) of a tiny
agent whose encoder projection is 36 -> 8 and decoder projection 8 -> 36, compiled once per
mesh and once without one, the reference.
"""

import re

import pytest

from lab.experiments import sac_ae as experiment
from tests.devices import run

SCRIPT = """
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from lab import parallel
from lab.train import sac_ae

SIZE, BATCH, ACTIONS = 20, 16, 2  # 20x20 -> 3x3x4 conv features: a projection of 36
config = sac_ae.SACAEConfig(batch_size=BATCH, features_dim=8, hidden_dim=16, num_filters=4)
k_agent, k_obs, k_next, k_action, k_reward = jax.random.split(jax.random.key(0), 5)
state = sac_ae.init(config, k_agent, (SIZE, SIZE, 9), ACTIONS)
obs_shape = (BATCH, SIZE, SIZE, 9)
batch = sac_ae.Batch(
    obs=np.asarray(jax.random.randint(k_obs, obs_shape, 0, 256), np.uint8),
    action=np.asarray(jax.random.uniform(k_action, (BATCH, ACTIONS), minval=-1, maxval=1)),
    reward=np.asarray(jax.random.normal(k_reward, (BATCH,))),
    next_obs=np.asarray(jax.random.randint(k_next, obs_shape, 0, 256), np.uint8),
    not_done=np.ones(BATCH, np.float32))


def compiled(mesh, state, batch):  # step 0 runs every sub-update
    update = functools.partial(sac_ae.update, config, mesh=mesh)
    return jax.jit(update).lower(state, batch).compile()


def arrays(tree):
    return [x for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))
            if not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)]


def spec(x):  # the partition spec with one entry per axis (jax drops trailing Nones)
    return (*x.sharding.spec, *(None,) * (x.ndim - len(x.sharding.spec)))


def close(a, b):
    worst = 0.0
    for x, y in zip(arrays(a), arrays(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
        worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)))
    return worst


reference = compiled(None, state, batch)(state, batch)

# data-parallel, 8 x 1: the state replicated, the batch given whole (one copy everywhere)
mesh = parallel.mesh(8)
state8 = parallel.replicate(state, mesh)
step = compiled(mesh, state8, batch)
hlo = step.as_text()
assert "u8[2,20,20,9]" in hlo  # update's own constraint: 2 of the 16 rows per device
assert "all-reduce" in hlo  # the gradients of the split batch are summed
out = step(state8, batch)
for x in jax.tree.leaves(out):  # the whole state and the metrics
    assert len(x.sharding.device_set) == 8 and x.sharding.is_fully_replicated, x.sharding
sharded = parallel.shard_batch(batch, mesh)
assert sharded.obs.sharding.spec == P("data") and len(sharded.obs.sharding.device_set) == 8
assert {s.data.shape for s in sharded.obs.addressable_shards} == {(2, SIZE, SIZE, 9)}
data_error = close(out, reference)

# model-parallel, data 2 x model 4: the projections' large axes split over "model"
mesh = parallel.mesh(8, model=4)
state8, sharded = parallel.shard_params(state, mesh), parallel.shard_batch(batch, mesh)
out = compiled(mesh, state8, sharded)(state8, sharded)
agent = out[0]
assert agent.critic.encoder.head.linear.weight.shape == (8, 36)
assert spec(agent.critic.encoder.head.linear.weight) == (None, "model")
assert spec(agent.target_critic.encoder.head.linear.weight) == (None, "model")
assert agent.decoder.linear.weight.shape == (36, 8)
assert spec(agent.decoder.linear.weight) == ("model", None)
mu = agent.decoder_opt_state[1][0].mu  # chain(add_decayed_weights, adam): Adam's first moment
assert spec(mu.linear.weight) == ("model", None)
assert {s.data.shape for s in agent.decoder.linear.weight.addressable_shards} == {(9, 8)}
assert agent.critic.encoder.trunk.convs[0].weight.sharding.is_fully_replicated
model_error = close(out, reference)
print(f"{data_error:.2e} {model_error:.2e}")
"""

# the notebook's configure on 8 devices: the batch must divide over the data devices
CONFIGURE = """
from lab.experiments import sac_ae as experiment

setup = experiment.configure(**PARAMS, batch_size=4, devices=8, model_devices=2)
assert setup.mesh().shape == {"data": 4, "model": 2}
try:
    experiment.configure(**PARAMS, batch_size=6, devices=8, model_devices=2)
    raise AssertionError("a batch of 6 over 4 data devices was accepted")
except ValueError as err:
    assert str(err).startswith("batch_size 6 does not divide over 4 data devices"), err
"""


PARAMS = dict(preset="default", env="pendulum_swingup", image_size=16, action_repeat=50,
              steps=40, init_steps=20, eval_every=20, eval_episodes=1, seeds=1,
              hidden_dim=16, num_filters=4, replay_capacity=1000, variants=["sac_ae"])


def test_sharded_update_matches_single_device():
    script = f"{SCRIPT}\nPARAMS = {PARAMS!r}\n{CONFIGURE}"
    data_error, model_error = map(float, run(script, 8).split())
    assert data_error < 1e-5 and model_error < 1e-5  # observed about 1e-6


# one device here, so a batch that does not divide is refused on 8 devices, in CONFIGURE
@pytest.mark.parametrize("devices, model_devices, message", [
    (2, 1, "asked for 2 devices but there are 1"),
    (1, 2, "the model axis (2) must divide the 1 devices"),
    (0, 1, "devices must be at least 1, got 0"),
])
def test_configure_refuses_devices_that_are_not_there(devices, model_devices, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        experiment.configure(**PARAMS, batch_size=4, devices=devices,
                             model_devices=model_devices)
