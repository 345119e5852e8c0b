"""The A3C loss against hand-computed returns, gradients and RMSProp steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.rl.a3c import a3c_loss, log_policy, rmsprop
from lab.rl.returns import bootstrapped_returns

GAMMA = 0.9


def returns(r, terminated, v_next, end):
    discount = GAMMA * (1.0 - jnp.asarray(terminated, jnp.float32))
    return np.asarray(bootstrapped_returns(jnp.asarray(r, jnp.float32), discount,
                                           jnp.asarray(end, bool),
                                           jnp.asarray(v_next, jnp.float32)))


def test_returns_bootstrap_from_the_state_after_the_rollout():
    # G_2 = 2 + .9 * 5 = 6.5; G_1 = 0 + .9 * 6.5 = 5.85; G_0 = 1 + .9 * 5.85 = 6.265
    np.testing.assert_allclose(returns([1, 0, 2], [0, 0, 0], [9, 9, 5], [0, 0, 1]),
                               [6.265, 5.85, 6.5], rtol=1e-6)


def test_returns_count_the_terminal_reward_and_stop_there():
    # terminated at t=1: G_1 = 0 + 0 (its reward counts, nothing after);
    # a new episode from t=2: G_2 = 2 + .9 * 5
    np.testing.assert_allclose(returns([1, 0.5, 2], [0, 1, 0], [9, 9, 5], [0, 1, 1]),
                               [1 + 0.9 * 0.5, 0.5, 6.5], rtol=1e-6)


def test_returns_bootstrap_a_truncated_episode_from_its_final_observation():
    # truncated at t=1 with V(final observation) = 3: G_1 = .5 + .9 * 3 = 3.2
    np.testing.assert_allclose(returns([1, 0.5, 2], [0, 0, 0], [9, 3, 5], [0, 1, 1]),
                               [1 + 0.9 * 3.2, 3.2, 6.5], rtol=1e-6)


def test_a3c_loss_matches_the_hand_computed_terms():
    logits = jnp.array([[0.0, jnp.log(3.0)], [jnp.log(4.0), 0.0]])  # pi = (.25,.75), (.8,.2)
    v, a, g = jnp.array([1.0, 2.0]), jnp.array([1, 0]), jnp.array([3.0, 1.0])
    loss, aux = a3c_loss(logits, v, a, g, entropy_cost=0.1, value_cost=0.5)
    adv = np.array([2.0, -1.0])
    log_pi_a = np.log([0.75, 0.8])
    h = -np.array([0.25 * np.log(0.25) + 0.75 * np.log(0.75), 0.8 * np.log(0.8)
                   + 0.2 * np.log(0.2)])
    policy = -np.sum(adv * log_pi_a) - 0.1 * h.sum()  # sums over the batch, as GA3C
    value = 0.5 * np.sum((np.array([3.0, 1.0]) - [1.0, 2.0]) ** 2)
    np.testing.assert_allclose([aux.policy_loss, aux.value_loss, aux.entropy, loss],
                               [policy, value, h.mean(), policy + value], rtol=1e-5)
    assert float(aux.advantage) == pytest.approx(0.5)


def test_a3c_loss_mask_leaves_padding_out():
    logits = jnp.array([[0.3, -0.2], [1.0, 0.0], [5.0, -5.0]])
    v, a, g = jnp.array([1.0, 2.0, 9.0]), jnp.array([1, 0, 1]), jnp.array([3.0, 1.0, -9.0])
    padded = a3c_loss(logits, v, a, g, jnp.array([1.0, 1.0, 0.0]))
    alone = a3c_loss(logits[:2], v[:2], a[:2], g[:2])
    np.testing.assert_allclose(jax.tree.leaves(padded), jax.tree.leaves(alone), rtol=1e-6)


def test_a3c_loss_value_gradient_comes_from_the_value_loss_alone():
    logits, v = jnp.zeros((3, 4)), jnp.array([0.5, -1.0, 2.0])
    a, g = jnp.array([0, 1, 3]), jnp.array([1.0, 1.0, 1.0])
    grad_v = jax.grad(lambda v: a3c_loss(logits, v, a, g, value_cost=0.5)[0])(v)
    np.testing.assert_allclose(grad_v, -0.5 * 2 * (g - v), rtol=1e-6)  # advantage stopped
    grad_g = jax.grad(lambda g: a3c_loss(logits, v, a, g)[0])(g)
    np.testing.assert_array_equal(grad_g, 0.0)  # returns are targets


def test_log_epsilon_bounds_the_log_of_a_tiny_probability():
    logits = jnp.array([[0.0, -30.0]])
    assert float(log_policy(logits)[0, 1]) == pytest.approx(-30.0, abs=1e-4)
    assert float(log_policy(logits, 1e-6)[0, 1]) == pytest.approx(np.log(1e-6), rel=1e-4)


def test_rmsprop_puts_eps_inside_the_square_root():
    g = jnp.array([2.0, -0.5])
    opt = rmsprop(learning_rate=0.1, decay=0.99, eps=0.1)
    update, _ = opt.update(g, opt.init(g))
    nu = 0.01 * g ** 2  # from 0
    np.testing.assert_allclose(update, -0.1 * g / np.sqrt(nu + 0.1), rtol=1e-6)
