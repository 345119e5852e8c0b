"""MPO and V-MPO losses against closed forms; the soft search against hand-computed backups."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lab.envs.control import ControlTask
from lab.rl import mpo, vmpo
from lab.rl.search import search, soft_value


def gaussian_kl(m0, s0, m1, s1):
    """KL(N(m0, s0^2) || N(m1, s1^2)) per dimension, the textbook closed form."""
    return np.log(s1 / s0) + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5


def test_mpo_dual_positive_and_inverse():
    for value in (1e-3, 0.5, 1.0, 10.0, 50.0):
        assert float(mpo.dual(jnp.asarray(mpo.inverse_dual(value)))) == pytest.approx(value,
                                                                                        rel=1e-5)
    assert float(mpo.dual(jnp.asarray(-1e4))) > 0
    with pytest.raises(ValueError, match="must be >"):
        mpo.inverse_dual(0.0)


def test_mpo_e_step_weights_are_softmax_and_dual_matches_formula():
    q = jax.random.normal(jax.random.key(0), (4, 7)) * 3
    param = jnp.asarray(mpo.inverse_dual(2.0))
    weights, loss, aux = mpo.e_step(q, param, 0.1)
    np.testing.assert_allclose(weights, jax.nn.softmax(q / 2.0, axis=1), rtol=1e-6)
    expected = 2.0 * 0.1 + 2.0 * np.mean(
        np.log(np.mean(np.exp(np.asarray(q) / 2.0), axis=1)))
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    w = np.asarray(weights)
    assert float(aux.kl_q) == pytest.approx(np.mean(np.sum(w * np.log(7 * w), axis=1)),
                                            rel=1e-5)
    # the dual's gradient reaches the temperature only
    g_q = jax.grad(lambda q: mpo.e_step(q, param, 0.1)[1])(q)
    assert float(jnp.abs(g_q).max()) == 0.0


def test_mpo_temperature_dual_optimum_has_kl_epsilon():
    """At the minimum of g(eta) the improved policy's KL to the sampling policy is epsilon."""
    q = jax.random.normal(jax.random.key(1), (1, 50)) * 5
    epsilon = 0.1
    loss = jax.jit(lambda p: mpo.e_step(q, p, epsilon)[1])
    grad = jax.jit(jax.grad(loss))
    lo, hi = -10.0, 100.0  # bisection on the (monotone) derivative of the convex dual
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if grad(jnp.asarray(mid)) < 0 else (lo, mid)
    _, _, aux = mpo.e_step(q, jnp.asarray(lo), epsilon)
    assert float(aux.kl_q) == pytest.approx(epsilon, rel=1e-3)


def test_mpo_m_step_kls_match_gaussian_closed_form():
    k = jax.random.split(jax.random.key(2), 4)
    mean, mean_old = jax.random.normal(k[0], (5, 2)), jax.random.normal(k[1], (5, 2))
    stddev = jnp.exp(0.3 * jax.random.normal(k[2], (5, 2)))
    stddev_old = jnp.exp(0.3 * jax.random.normal(k[3], (5, 2)))
    actions, weights = jnp.zeros((5, 3, 2)), jnp.ones((5, 3)) / 3
    zeros = jnp.zeros((2,))
    _, aux = mpo.m_step_loss(weights, actions, mean, stddev, mean_old, stddev_old, zeros,
                             zeros, 0.1, 0.1)
    m, s, m0, s0 = map(np.asarray, (mean, stddev, mean_old, stddev_old))
    np.testing.assert_allclose(aux.kl_mean, gaussian_kl(m0, s0, m, s0).mean(0), rtol=1e-5)
    np.testing.assert_allclose(aux.kl_stddev, gaussian_kl(m0, s0, m0, s).mean(0), rtol=1e-4,
                               atol=1e-7)
    # one multiplier on the summed KL
    _, aux1 = mpo.m_step_loss(weights, actions, mean, stddev, mean_old, stddev_old,
                              jnp.zeros((1,)), jnp.zeros((1,)), 0.1, 0.1)
    assert float(aux1.kl_mean[0]) == pytest.approx(float(aux.kl_mean.sum()), rel=1e-6)


def test_mpo_loss_stop_gradients():
    k = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(k[0], (4, 6))
    actions = jax.random.normal(k[1], (4, 6, 2))
    mean, stddev = jnp.zeros((4, 2)) + 0.1, jnp.ones((4, 2)) * 0.8
    duals = mpo.init_duals(2)

    def loss(q, mean_old, stddev_old, mean, duals):
        return mpo.mpo_loss(q, actions, mean, stddev, mean_old, stddev_old, duals)[0]

    g_q, g_mo, g_so, g_mean, g_duals = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(
        q, jnp.zeros((4, 2)), jnp.ones((4, 2)), mean, duals)
    for g in (g_q, g_mo, g_so):
        assert float(jnp.abs(g).max()) == 0.0
    assert float(jnp.abs(g_mean).max()) > 0
    assert all(float(jnp.abs(g).max()) > 0 for g in g_duals)


def test_mpo_multipliers_stay_positive():
    """With the constraint slack (KL 0 < epsilon) the multipliers' loss pushes them down
    without bound; softplus keeps them positive."""
    duals = mpo.init_duals(1)
    opt = optax.adam(1.0)
    state = opt.init(duals)
    mean = jnp.zeros((3, 1))

    def loss(duals):
        return mpo.m_step_loss(jnp.ones((3, 1)), jnp.zeros((3, 1, 1)), mean, jnp.ones((3, 1)),
                               mean, jnp.ones((3, 1)), duals.alpha_mean, duals.alpha_stddev,
                               1e-2, 1e-4)[0]

    for _ in range(300):
        grads = jax.grad(loss)(duals)
        updates, state = opt.update(grads, state)
        duals = optax.apply_updates(duals, updates)
    alpha = mpo.dual(duals.alpha_mean)
    assert float(alpha[0]) > 0 and float(alpha[0]) < 1e-3


def test_mpo_quadratic_bandit_moves_mean_within_trust_region():
    """Q(a) = -||a - a*||^2: MPO iterations move the policy mean to a*, each step's realised
    mean KL below epsilon_mean (plus a small Lagrangian slack), the multipliers positive."""
    target = jnp.array([0.8, -0.5])
    epsilon_mean = 0.05
    policy = {"mean": jnp.zeros((2,)), "log_stddev": jnp.zeros((2,))}
    duals = mpo.init_duals(2)
    opt = optax.multi_transform({"p": optax.adam(3e-2), "d": optax.adam(1e-1)}, ("p", "d"))
    state = opt.init((policy, duals))

    def loss(params, actions, q, old):
        policy, duals = params
        b = q.shape[0]
        mean = jnp.broadcast_to(policy["mean"], (b, 2))
        stddev = jnp.broadcast_to(jnp.exp(policy["log_stddev"]), (b, 2))
        mean_old = jnp.broadcast_to(old["mean"], (b, 2))
        stddev_old = jnp.broadcast_to(jnp.exp(old["log_stddev"]), (b, 2))
        return mpo.mpo_loss(q, actions, mean, stddev, mean_old, stddev_old, duals,
                            epsilon=0.1, epsilon_mean=epsilon_mean, epsilon_stddev=1e-3)

    @jax.jit
    def improve(params, state, key):
        old = params[0]
        actions = old["mean"] + jnp.exp(old["log_stddev"]) * jax.random.normal(key, (16, 20, 2))
        q = -jnp.sum((actions - target) ** 2, axis=-1)

        def inner(carry, _):
            params, state = carry
            (_, aux), grads = jax.value_and_grad(loss, has_aux=True)(params, actions, q, old)
            updates, state = opt.update(grads, state)
            return (optax.apply_updates(params, updates), state), aux
        (params, state), aux = jax.lax.scan(inner, (params, state), length=100)
        return params, state, jax.tree.map(lambda x: x[-1], aux)

    keys = jax.random.split(jax.random.key(4), 40)
    kls = []
    for key in keys:
        (policy, duals), state, aux = improve((policy, duals), state, key)
        kls.append(np.asarray(aux.m_step.kl_mean))
        assert np.all(np.asarray(aux.m_step.alpha_mean) > 0)
    np.testing.assert_allclose(policy["mean"], target, atol=0.1)
    assert np.max(kls) < 1.2 * epsilon_mean


def test_vmpo_keeps_exactly_the_top_half():
    adv = jax.random.normal(jax.random.key(5), (11,))
    duals = mpo.init_duals(1)
    actions = jnp.zeros((11, 1))
    _, aux = vmpo.vmpo_loss(adv, actions, actions, jnp.ones((11, 1)), actions,
                            jnp.ones((11, 1)), duals)
    top = np.argsort(-np.asarray(adv))[:5]
    expected = np.zeros(11)
    expected[top] = 1
    np.testing.assert_array_equal(aux.selected, expected)
    w = np.asarray(aux.weights)
    assert np.all(w[expected == 0] == 0) and w.sum() == pytest.approx(1.0, rel=1e-6)
    eta = float(mpo.dual(duals.temperature))
    a = np.asarray(adv)[top]
    np.testing.assert_allclose(w[top], np.exp(a / eta) / np.exp(a / eta).sum(), rtol=1e-5)


def test_vmpo_temperature_loss_matches_formula():
    adv = jnp.array([3.0, -1.0, 0.5, 2.0])
    duals = mpo.init_duals(1, temperature=1.5, alpha_mean=1e-6, alpha_stddev=1e-6)
    zeros, ones = jnp.zeros((4, 1)), jnp.ones((4, 1))

    def temperature_part(t):
        d = duals._replace(temperature=t)
        return vmpo.vmpo_loss(adv, zeros, zeros, ones, zeros, ones, d, epsilon_eta=0.01)[0]

    eta = 1.5
    expected_grad_eta = 0.01 + np.log(np.mean(np.exp(np.array([3.0, 2.0]) / eta))) - (
        np.sum(np.exp(np.array([3.0, 2.0]) / eta) * np.array([3.0, 2.0]))
        / np.sum(np.exp(np.array([3.0, 2.0]) / eta)) / eta)
    g = float(jax.grad(temperature_part)(duals.temperature))
    d_eta = float(jax.nn.sigmoid(duals.temperature))  # d softplus / dx
    assert g == pytest.approx(expected_grad_eta * d_eta, rel=1e-4)


def test_search_depth_one_returns_analytic_backup():
    """Model s' = s + a, r = -s'^2, critic Q(s, a) = -(s + a)^2, fixed action samples."""
    grid = jnp.array([[-1.0], [0.0], [0.5]])
    eta, gamma, s = 0.7, 0.9, jnp.array([0.3])

    actions, q_hat = search(
        s, jax.random.key(0), depth=1, num_actions=3, branching=3,
        temperature=jnp.asarray(eta), gamma=gamma, sample=lambda obs, k, n: grid[:n],
        critic=lambda obs, a: -jnp.sum((obs + a) ** 2, axis=-1),
        model=lambda st, a, k: (st + a, -jnp.sum((st + a) ** 2), jnp.ones(())),
        observe=lambda st: st)
    expected = []
    for a in (-1.0, 0.0, 0.5):
        s1 = 0.3 + a
        q_leaf = np.array([-(s1 + b) ** 2 for b in (-1.0, 0.0, 0.5)])
        v = eta * np.log(np.mean(np.exp(q_leaf / eta)))
        expected.append(-(s1**2) + gamma * v)
    np.testing.assert_array_equal(actions, grid)
    np.testing.assert_allclose(q_hat, expected, rtol=1e-5)
    # the soft value tends to the mean as eta grows and to the max as it shrinks
    q = jnp.array([1.0, 2.0, 4.0])
    assert float(soft_value(q, jnp.asarray(1e3))) == pytest.approx(7 / 3, rel=1e-3)
    assert float(soft_value(q, jnp.asarray(1e-3))) == pytest.approx(4 - 1e-3 * math.log(3),
                                                                    rel=1e-4)


def test_search_copies_of_environment_state_match_stepping_the_original():
    """Depth-1 search with the true Pendulum as model and a critic equal to the first
    observation coordinate: Q_hat_j = r_j + gamma * cos(theta'_j), with (r_j, theta'_j) from
    stepping the original environment with a_j one action at a time."""
    task = ControlTask("Pendulum-v1")
    step = jax.jit(task.step)
    state, _ = task.reset(jax.random.key(1))
    for i in range(5):
        state, *_ = step(state, jnp.array([0.3]), jax.random.key(i))
    grid = jnp.array([[-1.0], [-0.2], [0.4], [1.0]])

    def model(st, a, k):
        st, _, r, terminated, _ = task.step(st, a, k)
        return st, r, 1.0 - terminated.astype(jnp.float32)

    _, q_hat = jax.jit(lambda st: search(
        st, jax.random.key(2), depth=1, num_actions=4, branching=2,
        temperature=jnp.asarray(1.0), gamma=0.9, sample=lambda obs, k, n: grid[:n],
        critic=lambda obs, a: jnp.full((a.shape[0],), obs[0]),
        model=model, observe=task.observe))(state)
    for j, a in enumerate(grid):
        next_state, next_obs, r, _, _ = step(state, a, jax.random.key(0))
        assert float(q_hat[j]) == pytest.approx(float(r + 0.9 * next_obs[0]), rel=1e-5)
    assert int(state.time) == 5  # the original is untouched


def test_control_task_rescales_and_refuses_discrete_actions():
    task = ControlTask("Pendulum-v1")
    np.testing.assert_allclose(task.scale(jnp.array([-1.0])), [-2.0])
    np.testing.assert_allclose(task.scale(jnp.array([3.0])), [2.0])
    np.testing.assert_allclose(task.scale(jnp.array([0.25])), [0.5])
    car = ControlTask("MountainCarContinuous-v0")
    assert (car.obs_dim, car.action_dim, car.episode_steps) == (2, 1, 999)
    with pytest.raises(ValueError, match="Discrete action space"):
        ControlTask("CartPole-v1")
    with pytest.raises(ValueError, match="unknown gymnax environment"):
        ControlTask("Pendulum-v9")


def test_control_task_state_type_is_stable():
    task = ControlTask()
    s0, _ = task.reset(jax.random.key(0))
    s1, *_ = task.step(s0, jnp.zeros((1,)), jax.random.key(1))
    types = [(jnp.asarray(x).dtype, getattr(x, "weak_type", False))
             for x in jax.tree.leaves(s0)]
    assert types == [(x.dtype, x.weak_type) for x in jax.tree.leaves(s1)]
    assert eqx.tree_equal(jax.tree.structure(s0), jax.tree.structure(s1))
