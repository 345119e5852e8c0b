"""GA3C's actor-critic networks: shapes and parameter counts computed by hand."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models.ga3c import ActorCritic


def count(model) -> int:
    return sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_array)))


@pytest.mark.parametrize("torso, shape, actions, params", [
    # conv 3*3*4*16+16 = 592 -> 8x8x16; dense 1024*128+128; policy 128*3+3; value 129
    ("minatar", (10, 10, 4), 3, 592 + 131_200 + 387 + 129),
    # conv 8*8*4*16+16 = 4,112 -> 20x20x16; conv 4*4*16*32+32 = 8,224 -> 9x9x32;
    # dense 2592*256+256 = 663,808; policy 256*6+6; value 257
    ("atari", (84, 84, 4), 6, 4_112 + 8_224 + 663_808 + 1_542 + 257),
])
def test_actor_critic_shapes_and_parameter_counts(torso, shape, actions, params):
    model = ActorCritic(shape, actions, torso, key=jax.random.key(0))
    assert count(model) == params
    logits, value = jax.vmap(model)(jnp.ones((5, *shape)))
    assert logits.shape == (5, actions) and value.shape == (5,)
    assert np.isfinite(np.asarray(logits)).all()


def test_actor_critic_refuses_an_unknown_or_too_large_torso():
    with pytest.raises(ValueError, match="unknown torso 'resnet'"):
        ActorCritic((10, 10, 4), 3, "resnet", key=jax.random.key(0))
    with pytest.raises(ValueError, match="too small for the atari torso"):
        ActorCritic((10, 10, 4), 3, "atari", key=jax.random.key(0))
