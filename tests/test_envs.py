import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.envs import (
    MIN_IMAGE_SIZE,
    CartpoleSwingup,
    PendulumSwingup,
    frame_stack_indices,
    make,
    random_episode_return,
    stack_frames,
    tolerance,
)
from lab.envs.cartpole import _CART_COLOR, _VIEW_CENTER
from lab.envs.cartpole import _VIEW_HALF_EXTENT as CART_HALF
from lab.envs.pendulum import _POLE_COLOR
from lab.envs.pendulum import _VIEW_HALF_EXTENT as PENDULUM_HALF


def rollout_physics(env, state, u, steps):
    """``steps`` physics steps under the constant action ``u``; the states after each."""

    def body(carry, _):
        carry = env.physics_step(*carry, u)
        return carry, carry

    return jax.lax.scan(body, tuple(jnp.float32(s) for s in state), length=steps)[1]


def pixel_at(image, world_xy, center, half_extent):
    """The RGB value (floats in [0, 1]) of the pixel containing the world point."""
    size = image.shape[0]
    pixel = 2 * half_extent / size
    col = int((world_xy[0] - center[0] + half_extent) // pixel)
    row = int((center[1] + half_extent - world_xy[1]) // pixel)
    return np.asarray(image[row, col], np.float64) / 255


def test_tolerance_closed_forms():
    bounded = jax.jit(lambda x: tolerance(x, lower=0.0, upper=0.5))
    np.testing.assert_array_equal(bounded(jnp.array([0.3, 0.6])), [1.0, 0.0])
    gaussian = jax.jit(lambda x: tolerance(x, margin=2.0))
    np.testing.assert_allclose(gaussian(jnp.array([2.0, -1.0])), [0.1, 0.1**0.25], rtol=1e-6)
    quadratic = jax.jit(lambda x: tolerance(x, margin=1.0, value_at_margin=0.0,
                                            sigmoid="quadratic"))
    np.testing.assert_allclose(quadratic(jnp.array([0.5, 1.0, 2.0])), [0.75, 0.0, 0.0],
                               atol=1e-7)


def test_pendulum_zero_gravity_constant_velocity():
    env = PendulumSwingup(image_size=16, gravity=0.0, damping=0.0)
    theta, theta_dot = rollout_physics(env, (0.3, 1.7), 0.0, 50)
    np.testing.assert_allclose(theta_dot, 1.7, rtol=1e-6)
    np.testing.assert_allclose(theta[-1], 0.3 + 50 * env.dt * 1.7, rtol=1e-5)


def test_pendulum_torque_accelerates_by_torque_over_inertia():
    env = PendulumSwingup(image_size=16)
    _, theta_dot = env.physics_step(jnp.float32(0.0), jnp.float32(0.0), 1.0)
    np.testing.assert_allclose(theta_dot, env.dt * env.max_torque / (env.mass * env.length**2))


def test_pendulum_energy_conserved_without_damping():
    env = PendulumSwingup(image_size=16, damping=0.0, dt=1e-3)
    theta, theta_dot = rollout_physics(env, (1.0, 0.0), 0.0, 2000)
    energy = env.energy(theta, theta_dot)
    e0 = env.energy(1.0, 0.0)
    assert np.abs(energy - e0).max() < 1e-2 * np.abs(e0)
    assert np.ptp(np.asarray(theta)) > 1.0  # it really swung
    damped = PendulumSwingup(image_size=16, damping=0.1, dt=1e-3)
    theta, theta_dot = rollout_physics(damped, (1.0, 0.0), 0.0, 2000)
    assert damped.energy(theta[-1], theta_dot[-1]) < e0 - 0.05


def test_pendulum_upright_and_hanging_at_rest_are_equilibria():
    env = PendulumSwingup(image_size=16)
    for start in (0.0, math.pi):
        theta, theta_dot = rollout_physics(env, (start, 0.0), 0.0, 100)
        np.testing.assert_allclose(theta, start, atol=1e-4)
        np.testing.assert_allclose(theta_dot, 0.0, atol=1e-4)


def test_pendulum_reward_values():
    reward = jax.jit(PendulumSwingup(image_size=16).reward)
    theta = jnp.array([0.0, math.pi, math.pi / 2, 0.0])
    np.testing.assert_allclose(reward(theta, jnp.array([0.0, 0.0, 0.0, 5.0])),
                               [1.0, 0.0, 0.5, 0.55], rtol=1e-6, atol=1e-7)
    sparse = jax.jit(PendulumSwingup(image_size=16, sparse=True).reward)
    np.testing.assert_array_equal(
        sparse(jnp.radians(jnp.array([29.0, 31.0])), jnp.array([3.0, 0.0])), [1.0, 0.0])
    rewards = reward(*(10 * jax.random.normal(jax.random.key(0), (2, 1000))))
    assert rewards.min() >= 0.0 and rewards.max() <= 1.0


def test_cartpole_obeys_newton_and_euler_equations():
    env = CartpoleSwingup(image_size=16)
    theta, theta_dot, force = jax.random.normal(jax.random.key(1), (3, 100)) * jnp.array(
        [[3.0], [5.0], [10.0]])
    x_acc, theta_acc = jax.jit(env.accelerations)(theta, theta_dot, force)
    m, half, total = env.pole_mass, env.half_length, env.cart_mass + env.pole_mass
    # Horizontal force on the whole system, and torque about the pole's pivot.
    horizontal = total * x_acc + m * half * (
        theta_acc * jnp.cos(theta) - theta_dot**2 * jnp.sin(theta))
    np.testing.assert_allclose(horizontal, force, atol=1e-4)
    pivot = 4 / 3 * half * theta_acc + x_acc * jnp.cos(theta)
    np.testing.assert_allclose(pivot, env.gravity * jnp.sin(theta), atol=1e-4)


def test_cartpole_free_motion_conserves_energy_and_momentum():
    env = CartpoleSwingup(image_size=16, dt=1e-3)
    x, x_dot, theta, theta_dot = rollout_physics(env, (0.0, 0.1, 2.0, 0.0), 0.0, 1000)
    assert np.abs(x).max() < env.rail_limit  # the walls never act
    e0, p0 = env.energy(0.0, 0.1, 2.0, 0.0), env.momentum(0.1, 2.0, 0.0)
    assert np.abs(env.energy(x, x_dot, theta, theta_dot) - e0).max() < 1e-2 * abs(e0)
    np.testing.assert_allclose(env.momentum(x_dot, theta, theta_dot), p0, atol=2e-3)
    assert np.ptp(np.asarray(theta)) > 1.0


def test_cartpole_upright_at_rest_is_equilibrium_and_walls_stop_the_cart():
    env = CartpoleSwingup(image_size=16)
    states = rollout_physics(env, (0.0, 0.0, 0.0, 0.0), 0.0, 200)
    np.testing.assert_allclose(np.stack(states), 0.0, atol=1e-5)
    x, x_dot, _, _ = rollout_physics(env, (0.0, 0.0, math.pi, 0.0), 1.0, 300)
    assert x.max() <= env.rail_limit
    assert x[-1] == env.rail_limit and x_dot[-1] == 0.0


def test_cartpole_reward_values():
    reward = jax.jit(CartpoleSwingup(image_size=16).reward)
    zero = jnp.zeros(4)
    x, theta, u = jnp.array([0.0, 0.0, 2.0, 0.0]), jnp.array([0.0, 0.0, 0.0, math.pi]), zero
    u = u.at[1].set(1.0)
    np.testing.assert_allclose(reward(x, zero, theta, zero, u), [1.0, 0.8, 0.55, 0.0],
                               rtol=1e-6, atol=1e-7)
    rewards = reward(*(5 * jax.random.normal(jax.random.key(2), (5, 1000))))
    assert rewards.min() >= 0.0 and rewards.max() <= 1.0


def test_step_sums_rewards_over_action_repeat():
    env = CartpoleSwingup(image_size=16, action_repeat=3)
    state, _ = jax.jit(env.reset)(jax.random.key(3))
    next_state, _, reward, _ = jax.jit(env.step)(state, jnp.array([0.5]), None)
    physics = rollout_physics(env, state[:4], 0.5, 3)  # each of shape (3,)
    expected = jax.jit(env.reward)(*physics, 0.5).sum()
    np.testing.assert_allclose(reward, expected, rtol=1e-6)
    np.testing.assert_allclose(np.stack(next_state[:4]), np.stack(physics)[:, -1], rtol=1e-6)
    assert next_state.t == 1


@pytest.mark.parametrize("size", [32, 84])  # 64 in the cartpole test
def test_render_shape_dtype_and_moving_pole(size):
    env = PendulumSwingup(image_size=size)
    state, obs = jax.jit(env.reset)(jax.random.key(0))
    assert obs.shape == (size, size, 3) and obs.dtype == jnp.uint8
    render_at = jax.jit(jax.vmap(lambda theta: env.render(state._replace(theta=theta))))
    up, down = render_at(jnp.array([0.0, math.pi]))
    assert np.abs(up.astype(int) - down.astype(int)).sum() > 0
    on_pole = (0.0, 0.3)  # on the pole when upright, sky when hanging
    # The pole is at least 1.4 pixels wide, so it covers >= 70% of the pixel on its axis.
    assert np.abs(pixel_at(up, on_pole, (0, 0), PENDULUM_HALF) - _POLE_COLOR).max() < 0.25
    assert np.abs(pixel_at(down, on_pole, (0, 0), PENDULUM_HALF) - _POLE_COLOR).max() > 0.5


def test_cartpole_render_shows_cart_where_it_is():
    env = CartpoleSwingup(image_size=64)
    state, obs = jax.jit(env.reset)(jax.random.key(0))
    assert obs.shape == (64, 64, 3) and obs.dtype == jnp.uint8
    moved = jax.jit(env.render)(state._replace(x=jnp.float32(1.0)))
    np.testing.assert_allclose(pixel_at(moved, (1.15, 0.06), _VIEW_CENTER, CART_HALF),
                               _CART_COLOR, atol=0.02)
    assert np.abs(pixel_at(obs, (1.15, 0.06), _VIEW_CENTER, CART_HALF) - _CART_COLOR).max() > 0.2


@pytest.mark.parametrize("env_cls", [PendulumSwingup, CartpoleSwingup])
def test_jit_vmap_batch_runs_to_done(env_cls):
    env = env_cls(image_size=16, physics_steps=20, action_repeat=4)
    keys = jax.random.split(jax.random.key(4), 3)
    state, obs = jax.jit(jax.vmap(env.reset))(keys)
    assert obs.shape == (3, 16, 16, 3) and obs.dtype == jnp.uint8
    step = jax.jit(jax.vmap(env.step))
    actions = jnp.ones((3, 1))
    dones = []
    for _ in range(env.episode_steps):
        state, obs, reward, done = step(state, actions, keys)
        dones.append(np.asarray(done))
        assert reward.shape == (3,) and obs.shape == (3, 16, 16, 3)
        assert np.all((reward >= 0) & (reward <= env.action_repeat))
    assert env.episode_steps == 5
    np.testing.assert_array_equal(np.stack(dones), [[False] * 3] * 4 + [[True] * 3])


@pytest.mark.parametrize("name", ["pendulum_swingup", "cartpole_swingup"])
def test_random_policy_return_is_low(name):
    """A uniform random policy earns under 15% of the maximum return (1000 per episode)."""
    env = make(name, image_size=16)
    returns = jax.jit(jax.vmap(lambda k: random_episode_return(env, k)))(
        jax.random.split(jax.random.key(5), 4))
    assert np.all(returns >= 0) and returns.mean() < 0.15 * env.physics_steps


def test_make_defaults_and_errors():
    assert make("pendulum_swingup", image_size=84) == PendulumSwingup(image_size=84)
    cartpole = make("cartpole_swingup", image_size=64, action_repeat=4)
    assert cartpole.action_repeat == 4 and cartpole.episode_steps == 250
    assert make("cartpole_swingup", image_size=64).episode_steps == 125
    with pytest.raises(ValueError, match="cartpole_swingup.*pendulum_swingup"):
        make("acrobot", image_size=64)
    with pytest.raises(ValueError, match=f">= {MIN_IMAGE_SIZE}"):
        make("cartpole_swingup", image_size=MIN_IMAGE_SIZE - 1)
    with pytest.raises(ValueError, match="action_repeat"):
        make("pendulum_swingup", image_size=64, action_repeat=0)


def test_frame_stack_repeats_first_frame_of_episode():
    np.testing.assert_array_equal(frame_stack_indices(5, 4, 3), [4, 4, 5])
    np.testing.assert_array_equal(frame_stack_indices(9, 4, 3), [7, 8, 9])
    frames = jnp.arange(6, dtype=jnp.uint8)[:, None, None, None] * jnp.ones((6, 2, 2, 3),
                                                                              jnp.uint8)
    stacked = stack_frames(frames, 5, 4, 3)
    assert stacked.shape == (2, 2, 9)
    np.testing.assert_array_equal(stacked[0, 0], [4, 4, 4, 4, 4, 4, 5, 5, 5])
