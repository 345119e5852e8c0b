"""MPO and V-MPO with their seeds (and V-MPO's environments) split over simulated devices.

The sharded runs go through the experiment (``configure(..., devices=N)`` and ``train``) in one
fresh python with 8 simulated CPU devices (``tests/devices.py``) and are compared with the
same variant trained by ``lab.train`` without a mesh. The evaluation returns agree to 1e-3
relative (measured: MPO 2e-4 absolute on returns near -1000, V-MPO equal) and every leaf of
the final agents to ``atol=1e-3, rtol=1e-2`` (measured: MPO 8e-4, V-MPO 2e-6 absolute): a
device holding one seed compiles its own kernels, whose float rounding differs from the 4-seed
batch's in the last bits, and MPO's 48 Adam steps amplify that.
"""

import json

import pytest

from lab.experiments import policy_improvement as pi
from tests.devices import run as devices_run

PARAMS = dict(preset="default", env="Pendulum-v1", agent="mpo", depth=0, branching=2,
              model="none", search_in="learning", updates_per_step=1, more_updates=2,
              compare=False, seeds=4, total_steps=64, eval_every=32, vmpo_steps=512, widths=8,
              batch_size=16, learning_rate=3e-4, n_step=3, discount=0.99)

SCRIPT = """
import json

import jax
import numpy as np

from lab.experiments import policy_improvement as pi
from lab.train import mpo, vmpo

PARAMS = json.loads({params!r})
facts = {{}}


def worst(a, b):
    a, b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-2, atol=1e-3)
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))


def compare(name, setup, train):
    variant = setup.variant(setup.focus)
    keys = jax.random.split(jax.random.key(0), setup.seeds)  # as pi.train splits them
    sharded = pi.train(setup, variant)
    run, history = train(variant.config, setup.make_task(), keys)
    np.testing.assert_allclose(sharded.history.returns, history.returns, rtol=1e-3)
    facts[name] = dict(
        returns_error=float(np.max(np.abs(sharded.history.returns - history.returns))),
        agent_error=worst(sharded.run.agent, run.agent),
        specs=sorted({{tuple(x.sharding.spec) for x in jax.tree.leaves(sharded.run)}}),
        mesh=dict(setup.mesh(variant).shape),
        devices=len(sharded.run.obs.sharding.device_set),
        obs_shard=list(sharded.run.obs.addressable_shards[0].data.shape),
        agent_shard=list(jax.tree.leaves(sharded.run.agent)[0].addressable_shards[0].data.shape),
        agent_devices=len(jax.tree.leaves(sharded.run.agent)[0].sharding.device_set))


compare("mpo", pi.configure(**PARAMS, devices=4), mpo.train)
compare("vmpo", pi.configure(**PARAMS | dict(agent="vmpo"), devices=8), vmpo.train)
one_seed = pi.configure(**PARAMS | dict(agent="vmpo", seeds=1), devices=8)
facts["vmpo_one_seed_mesh"] = dict(one_seed.mesh(one_seed.variant("vmpo")).shape)
errors = {{}}
for name, fields in (("mpo_seeds", dict(seeds=6, devices=4)),
                     ("vmpo_envs", dict(agent="vmpo", seeds=1, devices=3))):
    try:
        pi.configure(**PARAMS | fields)
    except ValueError as err:
        errors[name] = str(err)
facts["errors"] = errors
print(json.dumps(facts))
"""


def test_sharded_mpo_and_vmpo_equal_single_device_runs():
    out = devices_run(SCRIPT.format(params=json.dumps(PARAMS)), 8)
    facts = json.loads(out.splitlines()[-1])
    m, v = facts["mpo"], facts["vmpo"]
    # MPO: 4 seeds on 4 devices, one seed's whole run state (agent, replay, env) per device
    assert m["mesh"] == {"data": 4, "model": 1} and m["specs"] == [["data"]]
    assert m["devices"] == 4 and m["obs_shard"] == [1, 3] and m["agent_shard"][0] == 1
    # V-MPO: 4 seeds on 8 devices, a 4 x 2 grid: each seed's 16 environments on 2 devices
    assert v["mesh"] == {"data": 4, "model": 2}
    assert v["specs"] == [["data"], ["data", "model"]]
    assert v["devices"] == 8 and v["obs_shard"] == [1, 8, 3]
    assert v["agent_shard"][0] == 1 and v["agent_devices"] == 8  # replicated over "model"
    assert facts["vmpo_one_seed_mesh"] == {"data": 1, "model": 8}  # one seed: envs over all
    assert m["returns_error"] <= 1.0 and v["returns_error"] <= 1.0  # returns near -1000
    assert m["agent_error"] <= 1e-2 and v["agent_error"] <= 1e-2  # the script: allclose too
    errors = facts["errors"]
    assert errors["mpo_seeds"].startswith("seeds 6 does not divide over 4 data devices")
    assert errors["vmpo_envs"].startswith("V-MPO splits each seed's 16 environments over "
                                          "devices // gcd(devices, seeds) = 3 devices")


@pytest.mark.parametrize("fields, message", [
    (dict(devices=2), "asked for 2 devices but there are 1 (cpu)"),
    (dict(devices=0), "devices must be at least 1, got 0"),
    (dict(agent="vmpo", devices=2), "asked for 2 devices but there are 1 (cpu)"),
    (dict(env="dmc:cartpole_swingup", devices=2), "dmc:* environments step on the host"),
])
def test_configure_devices_errors(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*")) as err:
        pi.configure(**PARAMS | fields)
    assert "\n" not in str(err.value)


def test_configure_one_device_trains_without_a_mesh():
    setup = pi.configure(**PARAMS)
    assert setup.devices == 1 and setup.mesh(setup.variant("mpo")) is None
