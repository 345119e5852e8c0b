"""``lab.parallel.megatron``: the collectives of Megatron's compiled train step.

One Transformer block's train step (SGD, ``lab.train.automap.loss``) is compiled under
Megatron's layout on a 2 x 4 (data x model) mesh of 8 simulated devices in a fresh process
(``tests/devices.py``), never run; ``lab.parallel.cost`` reads its collectives."""

import json

import pytest

from lab.parallel import cost
from tests.devices import run

BATCH, LENGTH, HIDDEN, DATA, MODEL = 4, 8, 32, 2, 4

SCRIPT = f"""
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from lab import parallel
from lab.models.transformer import Transformer
from lab.parallel import automap, cost
from lab.parallel.megatron import is_megatron, spec_of
from lab.train import automap as train

net = eqx.filter_eval_shape(lambda: Transformer(16, 16, {HIDDEN}, 4, 1, {LENGTH},
                                                key=jax.random.key(0)))
mesh = parallel.mesh(8, model={MODEL})
space = automap.space(net, mesh, include=lambda path, x: ".blocks[" in path and x.ndim == 2,
                      axes=["model"])
layout = space.layout(space.choice(lambda path, shape: spec_of(path, None)))
assert is_megatron(layout)
tokens = jax.ShapeDtypeStruct(({BATCH}, {LENGTH}), jnp.int32)
scorer = automap.Scorer(train.loss, optax.sgd(0.1), net, (tokens, tokens), mesh)
found = cost.collectives(scorer.compile(layout))
# each parameter's bytes on one device: its size over the devices its spec splits it on
shards = [(x.size // (mesh.shape["model"] if "model" in layout.spec(p, x) else 1)) * 4
          for p, x in jax.tree_util.tree_flatten_with_path(net)[0]]
print(json.dumps({{"collectives": [c._asdict() for c in found],
                  "parameter_bytes": sum(shards)}}))
"""


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads(run(SCRIPT, devices=8).splitlines()[-1])


def by_axis(found: list[dict]) -> dict[str, list[dict]]:
    """The collectives on the model axis (devices 0-3 and 4-7 of the 2 x 4 mesh) and on
    the data axis (0 and 4, 1 and 5, ...)."""
    axes = {((0, 1, 2, 3), (4, 5, 6, 7)): "model", ((0, 4), (1, 5), (2, 6), (3, 7)): "data"}
    out: dict[str, list[dict]] = {"model": [], "data": []}
    for c in found:
        groups = tuple(sorted(tuple(sorted(g)) for g in cost.groups(c["replica_groups"], 8)))
        out[axes[groups]].append(c)  # a KeyError: a collective on neither axis
    return out


def test_megatron_block_step_all_reduces_four_activations_on_the_model_axis(facts):
    """Megatron-LM's f and g per block: the attention's and the MLP's outputs forward, the
    gradients of the qkv and mlp_in inputs backward, each (B / data) x L x H float32. (Three
    separate query, key and value layers made it six: each input gradient on its own.)"""
    found = by_axis(facts["collectives"])
    activation = BATCH // DATA * LENGTH * HIDDEN * 4
    model = found["model"]
    assert {c["kind"] for c in model} == {"all-reduce"}
    assert all(c["count"] == 1 and c["exact"] for c in model)
    # XLA may combine several into one instruction of several operands: count operands
    assert all(c["bytes"] % activation == 0 for c in model)
    assert sum(c["bytes"] for c in model) == 4 * activation


def test_megatron_block_step_data_parallel_reduction_is_the_gradients_and_the_loss(facts):
    data = by_axis(facts["collectives"])["data"]
    assert {c["kind"] for c in data} == {"all-reduce"}
    # every gradient's shard on this device, and two scalars: the summed cross-entropy and
    # the number of targets it is divided by
    assert sum(c["bytes"] * c["count"] for c in data) == facts["parameter_bytes"] + 2 * 4
