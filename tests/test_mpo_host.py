"""DMC from states (``lab.envs.dmc_states``) and MPO driven from a host loop
(``lab.train.mpo_host``). The tests that run MuJoCo skip where dm_control is not installed."""

import jax
import numpy as np
import pytest

from lab.train.mpo import MPOConfig
from lab.train.mpo_host import stack_histories, train_host, train_host_seeds
from lab.train.rl_loop import History

METRICS = ("critic_loss", "policy_loss", "model_loss", "temperature", "kl_q", "q_mean",
           "kl_mean", "kl_stddev", "alpha_mean", "alpha_stddev")


@pytest.fixture(scope="module")
def dmc_states(suite):
    from lab.envs import dmc_states
    return dmc_states


def test_dmc_states_observation_is_the_flat_state(suite, dmc_states):
    env = dmc_states.make_dmc_states("cartpole_swingup", seed=3)
    reference = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    obs, time_step = env.reset(), reference.reset()
    assert env.obs_dim == 5 and env.action_dim == 1 and env.episode_steps == 1000
    assert env.obs_keys == ("position", "velocity")
    assert obs.shape == (5,) and obs.dtype == np.float32 and np.all(np.isfinite(obs))
    expected = np.concatenate([time_step.observation["position"],
                               time_step.observation["velocity"]])
    np.testing.assert_allclose(obs, expected, rtol=1e-6)
    obs, reward, terminated, truncated = env.step(np.array([0.5]))
    time_step = reference.step(np.array([0.5]))
    np.testing.assert_allclose(obs, np.concatenate(list(time_step.observation.values())),
                               rtol=1e-5, atol=1e-7)
    assert reward == pytest.approx(time_step.reward) and not terminated and not truncated
    assert repr(env) == "DMCStates('cartpole_swingup', action_repeat=1)"
    env.close()


def test_dmc_states_actions_rescaled_to_task_bounds(dmc_states):
    env = dmc_states.make_dmc_states("quadruped_walk")  # bounds are not [-1, 1]
    spec = env._env.action_spec()
    env.reset()
    for action, ctrl in ((-1.0, spec.minimum), (1.0, spec.maximum), (5.0, spec.maximum),
                         (0.0, 0.5 * (spec.minimum + spec.maximum))):
        env.step(np.full(env.action_dim, action))
        np.testing.assert_allclose(env._env.physics.data.ctrl, ctrl)
    assert not np.allclose(spec.minimum, -1.0)
    env.close()


@pytest.mark.parametrize("action_repeat, episode_steps", [(50, 20), (3, 334)])
def test_dmc_states_truncates_at_episode_steps(dmc_states, action_repeat, episode_steps):
    env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=action_repeat)
    assert env.episode_steps == episode_steps
    env.reset()
    total = 0.0
    for t in range(episode_steps):
        _, reward, terminated, truncated = env.step(np.zeros(1))
        total += reward
        assert not terminated and truncated == (t == episode_steps - 1)
    assert 0.0 <= total <= 1000.0
    env.close()


def test_dmc_states_unknown_task_is_one_line_error(dmc_states):
    with pytest.raises(ValueError, match="unknown dm_control task 'cartpole_swing'; choose one "
                                         "of .*cartpole_swingup") as err:
        dmc_states.make_dmc_states("cartpole_swing")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="action_repeat"):
        dmc_states.make_dmc_states("cartpole_swingup", action_repeat=0)


def test_train_host_refuses_true_model_before_any_work():
    config = MPOConfig(model="true", depth=1, batch_size=8, learning_starts=8)
    with pytest.raises(ValueError, match="model='learned'.*model='none'"):
        train_host(config, object(), object(), jax.random.key(0))  # touching them would fail


def test_train_host_history_shapes_and_metrics(dmc_states):
    config = MPOConfig(widths=(8,), num_samples=2, batch_size=8, n_step=2, target_period=5,
                       learning_starts=300, total_steps=400, eval_every=200, eval_episodes=1)
    env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=8)  # 125-step episodes
    eval_env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=8)
    seen = []
    agent, history = train_host(config, env, eval_env, jax.random.key(0), callback=seen.append)
    np.testing.assert_array_equal(history.env_steps, [0, 200, 400])
    assert history.returns.shape == (1, 3) and np.all(np.isfinite(history.returns))
    assert np.all((history.returns >= 0) & (history.returns <= 1000))
    assert history.seconds.shape == (3,) and np.all(np.diff(history.seconds) > 0)
    assert history.compile_seconds > 0 and len(seen) == 2
    assert set(history.metrics) == set(METRICS)
    for name, values in history.metrics.items():
        assert values.shape[:2] == (1, 2), name
        # no update before learning_starts: the first interval's means are NaN, as in make_run
        assert np.all(np.isnan(values[:, 0])), name
        assert np.all(np.isnan(values[:, 1])) == (name == "model_loss"), name
    assert int(agent.updates) == 100  # steps 300..399
    env.close()
    eval_env.close()


def test_stack_histories_stacks_seeds_and_adds_seconds():
    def history(returns, seconds, metric):
        return History(np.array([0, 10, 20]), np.array([returns]), np.array(seconds), 1.5,
                       {"q_mean": np.array([metric])})
    stacked = stack_histories([history([0, 1, 2], [0, 1, 3], [4, 5]),
                               history([6, 7, 8], [0, 2, 4], [9, 10])])
    np.testing.assert_array_equal(stacked.env_steps, [0, 10, 20])
    np.testing.assert_array_equal(stacked.returns, [[0, 1, 2], [6, 7, 8]])
    np.testing.assert_array_equal(stacked.seconds, [0, 3, 7])
    np.testing.assert_array_equal(stacked.metrics["q_mean"], [[4, 5], [9, 10]])
    assert stacked.compile_seconds == 3.0
    short = History(np.array([0, 10]), np.array([[1, 2]]), np.array([0, 1]), 0.5,
                    {"q_mean": np.array([[3]])})
    cut = stack_histories([history([0, 1, 2], [0, 1, 3], [4, 5]), short])
    assert cut.returns.shape == (2, 2) and cut.metrics["q_mean"].shape == (2, 1)


def test_train_host_learned_model_search_runs(dmc_states):
    config = MPOConfig(widths=(8,), num_samples=2, batch_size=8, n_step=2, depth=1,
                       model="learned", search_in="both", learning_starts=20, total_steps=40,
                       eval_every=40, eval_episodes=1)
    env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=50)  # 20-step episodes
    eval_env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=50)
    with pytest.raises(ValueError, match="eval_env must be a second environment"):
        train_host(config, env, env, jax.random.key(1))
    agent, history = train_host(config, env, eval_env, jax.random.key(1))
    assert history.returns.shape == (1, 2) and np.all(np.isfinite(history.returns))
    assert np.all(np.isfinite(np.concatenate([m.ravel() for m in history.metrics.values()])))
    assert int(agent.updates) == 20
    env.close()
    eval_env.close()


def test_train_host_seeds_stacks_and_callback_stops(dmc_states):
    config = MPOConfig(widths=(8,), num_samples=2, batch_size=8, n_step=2, learning_starts=100,
                       total_steps=200, eval_every=100, eval_episodes=1)
    env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=8)
    eval_env = dmc_states.make_dmc_states("cartpole_swingup", action_repeat=8)
    calls = []

    def callback(history):  # the second seed stops at its first evaluation after step 0
        calls.append(history.returns.shape)
        return len(calls) < 3

    agents, history = train_host_seeds(config, env, eval_env,
                                       [jax.random.key(0), jax.random.key(1)], callback=callback)
    assert calls == [(1, 2), (1, 3), (1, 2)] and len(agents) == 2
    np.testing.assert_array_equal(history.env_steps, [0, 100])
    assert history.returns.shape == (2, 2) and np.all(np.isfinite(history.returns))
    assert history.metrics["critic_loss"].shape == (2, 1)
    assert np.all(np.isnan(history.metrics["critic_loss"]))  # no update before step 100
    assert int(agents[0].updates) == 100 and int(agents[1].updates) == 0
    env.close()
    eval_env.close()
