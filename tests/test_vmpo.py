import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.envs.control import ControlTask
from lab.rl.mpo import dual
from lab.train import vmpo


def test_bootstrapped_returns_matches_hand_computed():
    # gamma = 0.5; column 0: termination at t=1, truncation at t=2; column 1: no episode end.
    r_t = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    terminated = jnp.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
    end_t = jnp.array([[0, 0], [1, 0], [1, 0], [0, 0]], bool)
    v_tp1 = jnp.array([[10.0, 10.0], [20.0, 20.0], [30.0, 30.0], [40.0, 40.0]])
    discount_t = 0.5 * (1.0 - terminated.astype(jnp.float32))
    returns = vmpo.bootstrapped_returns(r_t, discount_t, end_t, v_tp1)
    # column 0: G3 = 4 + .5*40 = 24; G2 = 3 + .5*30 = 18 (truncated: bootstrap);
    # G1 = 2 (terminated: no bootstrap); G0 = 1 + .5*2 = 2.
    # column 1: G3 = 24; G2 = 3 + .5*24 = 15; G1 = 2 + 7.5 = 9.5; G0 = 1 + 4.75 = 5.75.
    np.testing.assert_allclose(returns, [[2.0, 5.75], [2.0, 9.5], [18.0, 15.0], [24.0, 24.0]])


def test_bootstrapped_returns_stop_gradient_to_values():
    r_t, v_tp1 = jnp.ones((3,)), jnp.full((3,), 2.0)
    discount_t, end_t = jnp.full((3,), 0.9), jnp.zeros((3,), bool)
    grad = jax.grad(lambda v: jnp.sum(vmpo.bootstrapped_returns(r_t, discount_t, end_t, v)))(
        v_tp1)
    np.testing.assert_array_equal(grad, 0.0)


@pytest.fixture(scope="module")
def setup():
    task = ControlTask("Pendulum-v1")
    config = vmpo.VMPOConfig(num_envs=4, unroll=8, target_period=2, eval_every=64,
                             total_steps=128, eval_episodes=2)
    k_agent, k_obs, k_act, k_rew = jax.random.split(jax.random.key(0), 4)
    t, n = config.unroll, config.num_envs
    obs = jax.random.normal(k_obs, (t + 1, n, task.obs_dim))
    rollout = vmpo.Rollout(obs[:-1], jax.random.normal(k_act, (t, n, task.action_dim)),
                           jax.random.normal(k_rew, (t, n)), jnp.zeros((t, n), bool),
                           jnp.zeros((t, n), bool).at[3].set(True), obs[1:])
    agent = vmpo.init_agent(config, task, k_agent)
    step = eqx.filter_jit(lambda a, r: vmpo.update(config, a, r))
    agents = [agent]
    for _ in range(3):
        agent, metrics = step(agent, rollout)
        agents.append(agent)
    return agents, metrics


def _arrays(module):
    return jax.tree.leaves(eqx.filter(module, eqx.is_array))


def _equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(b), strict=True))


def test_vmpo_update_duals_positive_and_policy_changes(setup):
    agents, metrics = setup
    before, after = agents[0], agents[3]
    for x in after.duals:
        assert np.all(np.isfinite(x)) and np.all(dual(x) > 0)
    assert not np.array_equal(before.duals.temperature, after.duals.temperature)
    # at the first update the target is the policy: each KL is 0, below its epsilon, so each
    # multiplier's loss alpha (epsilon - KL) falls with alpha and Adam lowers it (a dual with
    # the sign flipped would raise it)
    for name in ("alpha_mean", "alpha_stddev"):
        assert np.all(dual(getattr(agents[1].duals, name)) < dual(getattr(before.duals, name)))
    assert all(np.all(np.isfinite(x)) for x in _arrays(after.policy))
    assert not _equal(before.policy, after.policy)
    assert not _equal(before.value, after.value)
    for name in ("value_loss", "temperature", "kl_mean", "kl_stddev", "alpha_mean",
                 "alpha_stddev", "advantage"):
        assert np.all(np.isfinite(metrics[name])), name


def test_vmpo_target_copied_every_target_period(setup):
    agents, _ = setup  # target_period = 2: copies after the 2nd update only
    assert _equal(agents[1].target_policy, agents[0].policy)
    assert not _equal(agents[1].target_policy, agents[1].policy)
    assert _equal(agents[2].target_policy, agents[2].policy)
    assert _equal(agents[3].target_policy, agents[2].policy)
    assert not _equal(agents[3].target_policy, agents[3].policy)


def test_vmpo_train_pendulum_history_shapes():
    config = vmpo.VMPOConfig(widths=(16,), num_envs=4, unroll=8, eval_every=128,
                             total_steps=256, eval_episodes=1)
    keys = jax.random.split(jax.random.key(1), 2)
    run, history = vmpo.train(config, ControlTask("Pendulum-v1"), keys)
    assert history.env_steps.tolist() == [0, 128, 256]
    assert history.returns.shape == (2, 3)
    assert np.all(np.isfinite(history.returns))
    assert np.all(history.returns < 0)  # Pendulum's rewards are negative
    assert history.metrics["kl_mean"].shape == (2, 2, 1)
    assert history.metrics["value_loss"].shape == (2, 2)
    assert np.all(np.isfinite(history.metrics["value_loss"]))
    # 2 intervals of 128 / 32 = 4 rollouts, each followed by updates_per_rollout updates
    assert run.agent.updates.tolist() == [8 * config.updates_per_rollout] * 2
    assert run.obs.shape == (2, 4, 3)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("epsilon_eta", 0.0, "epsilon_eta"),
    ("epsilon_mean", -1.0, "epsilon_mean"),
    ("epsilon_stddev", 0.0, "epsilon_stddev"),
    ("target_period", 0, "target_period"),
    ("eval_every", 100, "eval_every"),
])
def test_vmpo_config_errors(field, value, match):
    with pytest.raises(ValueError, match=match):
        vmpo.VMPOConfig(**{field: value})


def test_vmpo_config_batch_of_one_refused():
    with pytest.raises(ValueError, match="num_envs \\* unroll"):
        vmpo.VMPOConfig(num_envs=1, unroll=1, eval_every=1, total_steps=1)


def test_vmpo_config_total_steps_multiple_of_eval_every():
    with pytest.raises(ValueError, match="total_steps"):
        vmpo.VMPOConfig(num_envs=2, unroll=2, eval_every=8, total_steps=12)
