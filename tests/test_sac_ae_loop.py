"""The SAC-AE training loop on a tiny JAX task: schedule, exact resume, bad input."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.envs import PendulumSwingup
from lab.train import checkpoint as checkpoints
from lab.train import sac_ae
from lab.train import sac_ae_loop as loops

ENV = PendulumSwingup(image_size=16, action_repeat=4, physics_steps=40)  # 10-step episodes
AGENT = sac_ae.SACAEConfig(batch_size=4, hidden_dim=16, features_dim=8, num_filters=4)
LOOP = loops.LoopConfig(steps=30, init_steps=10, eval_every=10, eval_episodes=2,
                        replay_capacity=64)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))
            if not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)]


@pytest.fixture(scope="module")
def uninterrupted():
    return loops.train(ENV, AGENT, LOOP, jax.random.key(0))


def test_follows_the_reference_schedule(uninterrupted):
    state, history = uninterrupted
    # init_steps updates at step init_steps, then one per step: 10 + 19
    assert int(state.agent.step) == LOOP.init_steps + (LOOP.steps - LOOP.init_steps - 1)
    assert int(state.step) == LOOP.steps
    assert np.isnan(history.logs.critic_loss[:LOOP.init_steps]).all()
    assert np.isfinite(history.logs.critic_loss[LOOP.init_steps:]).all()
    assert np.isfinite(history.logs.reconstruction_loss[LOOP.init_steps:]).all()
    # the actor updates every 2nd update; the last one made at a step decides what is logged
    assert np.isfinite(history.logs.actor_loss[LOOP.init_steps:]).any()
    # episodes of 10 steps: a return is logged at steps 9, 19, 29, and equals the reward sum
    ends = np.flatnonzero(np.isfinite(history.logs.episode_return))
    assert ends.tolist() == [9, 19, 29]
    np.testing.assert_allclose(history.logs.episode_return[9],
                               history.logs.reward[:10].sum(), rtol=1e-5)
    # replay: 30 steps + 4 episode starts (the last reset included)
    assert int(state.replay.count) == LOOP.steps + 4
    assert history.eval_steps.tolist() == [0, 10, 20, 30]
    assert np.isfinite(history.eval_returns).all()
    assert history.eval_returns.shape == (4, LOOP.eval_episodes)


def test_resume_after_an_interruption_is_exact(uninterrupted, tmp_path):
    path = tmp_path / "run.ckpt"
    _, partial = loops.train(ENV, AGENT, LOOP, jax.random.key(0), checkpoint=path,
                             stop_after=1)
    assert np.isnan(partial.eval_returns[2:]).all()  # stopped after the first chunk
    assert checkpoints.read_info(path)["done"] == 1
    state, history = loops.train(ENV, AGENT, LOOP, jax.random.key(0), checkpoint=path)
    expected_state, expected = uninterrupted
    for a, b in zip(_leaves(state), _leaves(expected_state), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(jax.random.key_data(state.key),
                                  jax.random.key_data(expected_state.key))
    np.testing.assert_array_equal(history.eval_returns, expected.eval_returns)
    for a, b in zip(history.logs, expected.logs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_another_run_is_refused_and_kept(tmp_path):
    path = tmp_path / "run.ckpt"
    loops.train(ENV, AGENT, LOOP, jax.random.key(0), checkpoint=path, stop_after=1)
    before = path.read_bytes()
    other = dataclasses.replace(AGENT, discount=0.9)
    with pytest.raises(ValueError, match="different agent"):
        loops.train(ENV, other, LOOP, jax.random.key(0), checkpoint=path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("agent,loop,message", [
    (dataclasses.replace(AGENT, batch_size=11), LOOP, "batch size 11 is larger than the 10"),
    (AGENT, dataclasses.replace(LOOP, replay_capacity=10), "replay capacity 10 must exceed"),
    (dataclasses.replace(AGENT, num_layers=5), LOOP, "image size 16 is too small"),
])
def test_bad_runs_fail_before_any_work(agent, loop, message):
    with pytest.raises(ValueError, match=message):
        loops.check(ENV, agent, loop)


def test_steps_must_be_a_multiple_of_eval_every():
    with pytest.raises(ValueError, match="multiple of eval_every"):
        loops.LoopConfig(steps=25, eval_every=10)


def test_episode_and_reconstruction_shapes(uninterrupted):
    state, _ = uninterrupted
    ret, frames, rewards = eqx.filter_jit(loops.episode)(ENV, state.agent, jax.random.key(3),
                                                         LOOP.num_frames)
    assert frames.shape == (ENV.episode_steps + 1, 16, 16, 3) and frames.dtype == jnp.uint8
    np.testing.assert_allclose(ret, rewards.sum(), rtol=1e-6)
    obs = loops.replays.latest(state.replay, LOOP.num_frames)[None]
    rec = loops.reconstruct(state.agent, obs)
    assert rec.shape == obs.shape and rec.dtype == jnp.uint8
