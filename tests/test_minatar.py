"""MinAtar games behind lab.envs: gymnax 1.0's auto-reset with terminated and truncated
apart, the final observation, sticky actions, and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.envs import MinAtarTask


def rollout(task: MinAtarTask, steps: int, batch: int, action: int | None = None):
    """``steps`` steps of ``batch`` games with random (or fixed) actions, jitted."""
    def one(key):
        k_reset, k_run = jax.random.split(key)
        obs, state = task.reset(k_reset)

        def body(carry, key):
            obs, state = carry
            k_act, k_step = jax.random.split(key)
            a = (jax.random.randint(k_act, (), 0, task.num_actions) if action is None
                 else jnp.asarray(action))
            obs2, state, step = task.step(k_step, state, a)
            return (obs2, state), (obs, obs2, step)

        return jax.lax.scan(body, (obs, state), jax.random.split(k_run, steps))[1]

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), batch))


def test_breakout_terminates_and_auto_resets_with_the_final_observation():
    task = MinAtarTask("breakout")
    assert task.obs_shape == (10, 10, 4) and task.num_actions == 3
    before, after, step = rollout(task, 200, 4)
    assert after.dtype == jnp.float32 and set(np.unique(after)) <= {0.0, 1.0}
    done = np.asarray(step.terminated | step.truncated)
    assert np.asarray(step.terminated).sum() >= 4, "random play should lose some balls"
    assert not np.asarray(step.truncated).any()  # 200 steps: below the 1,000-step limit
    # where the episode goes on, the final observation is the next one; where it ended,
    # the next observation is a new episode's and the final one is where it ended
    np.testing.assert_array_equal(np.asarray(step.final_obs)[~done], np.asarray(after)[~done])
    ended = np.asarray(step.final_obs)[done] != np.asarray(after)[done]
    assert ended.reshape(ended.shape[0], -1).any(axis=1).all()


def test_time_limit_truncates_without_terminating():
    task = MinAtarTask("freeway", max_steps=7)  # Freeway never ends by itself
    _, _, step = rollout(task, 21, 2)
    truncated = np.asarray(step.truncated)
    assert truncated[:, [6, 13, 20]].all() and truncated.sum() == 6
    assert not np.asarray(step.terminated).any()


def test_sticky_actions_repeat_the_previous_action_at_their_rate():
    task = MinAtarTask("breakout", sticky=0.5)
    _, state = task.reset(jax.random.key(1))
    state = state._replace(last_action=jnp.asarray(1, jnp.int32))
    keys = jax.random.split(jax.random.key(2), 4000)
    executed = jax.jit(jax.vmap(lambda k: task.step(k, state, 2)[2].action))(keys)
    assert set(np.unique(executed)) == {1, 2}
    assert np.mean(np.asarray(executed) == 1) == pytest.approx(0.5, abs=0.04)
    assert (np.asarray(rollout(MinAtarTask("breakout"), 5, 1, action=2)[2].action) == 2).all()


@pytest.mark.parametrize("kwargs, message", [
    ({"game": "pong"}, "unknown MinAtar game 'pong'; choose one of breakout"),
    ({"sticky": 1.0}, r"sticky must be in \[0, 1\)"),
    ({"max_steps": -1}, "max_steps must be 0"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MinAtarTask(**kwargs)


def test_host_game_matches_gymnax_layout_and_auto_resets_like_it():
    from lab.envs.minatar import HostMinAtar

    for game in ("breakout", "seaquest"):
        host, task = HostMinAtar(game, seed=0), MinAtarTask(game)
        obs = host.reset()
        ref, _ = task.reset(jax.random.key(0))
        assert obs.shape == task.obs_shape and obs.dtype == np.float32
        # the same objects in the same channels at the start of a game
        np.testing.assert_array_equal(obs.sum(axis=(0, 1)), np.asarray(ref).sum(axis=(0, 1)))
    host = HostMinAtar("freeway", max_steps=4, seed=0)  # Freeway only ends by its limit
    host.reset()
    steps = [host.step(1)[1] for _ in range(8)]
    assert [s.truncated for s in steps] == [False, False, False, True] * 2
    assert not any(s.terminated for s in steps) and host.t == 0  # reset after the limit
    breakout = HostMinAtar("breakout", seed=1)
    breakout.reset()
    for _ in range(500):
        obs, s = breakout.step(0)
        if s.terminated:
            break
    assert s.terminated and not np.array_equal(obs, s.final_obs)  # a new game started


def test_gymnax_made_first_inside_jit_is_kept_concrete():
    """The tasks make their gymnax environment on first use; made first while tracing, what
    they keep must be concrete values (a tracer kept there would leak into the next trace)."""
    from lab.envs.control import ControlTask

    task = ControlTask("Pendulum-v1")
    assert "_gymnax" not in vars(task)  # nothing made by the parameter checks
    first = jax.jit(lambda a: task.scale(a))(jnp.array([0.5]))  # made here, inside the trace
    assert not isinstance(task._low, jax.core.Tracer)
    assert float(first[0]) == float(jax.jit(task.scale)(jnp.array([0.5]))[0]) == 1.0
    game = MinAtarTask("breakout", max_steps=7)
    assert "_gymnax" not in vars(game)
    obs, _ = jax.jit(game.reset)(jax.random.key(0))  # made inside the trace
    assert game.episode_steps == 7 and obs.shape == game.obs_shape
