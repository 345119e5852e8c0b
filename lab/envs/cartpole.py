"""Cart-pole swing-up from pixels, a pure-JAX take on the DeepMind Control Suite task.

Tassa et al. 2018, "DeepMind Control Suite", https://arxiv.org/abs/1801.00690 (the
``cartpole.swingup`` task); the dynamics are Barto, Sutton & Anderson 1983 (cart of mass
``M``, uniform pole of mass ``m`` and half-length ``l``, frictionless), with ``theta`` measured
from upright (positive is clockwise on screen, pole tip at ``(x + 2l sin theta, 2l cos theta)``)
and the force ``F = max_force * u``, ``u in [-1, 1]``:

    theta'' = (g sin theta - cos theta (F + m l theta'^2 sin theta) / (M + m))
              / (l (4/3 - m cos^2 theta / (M + m)))
    x''     = (F + m l (theta'^2 sin theta - theta'' cos theta)) / (M + m).

The defaults follow dm_control's model (M = 1, m = 0.1, pole length 2l = 1, force 10 N,
dt = 0.01 s, 1000 physics steps = 10 s per episode); the cart runs on a rail between walls at
``x = +-rail_limit`` that stop it dead (inelastic). Integration is semi-implicit Euler. An
episode starts as in dm_control: ``x, x', theta', theta - pi`` each ``0.01 N(0, 1)``.

Reward per physics step, dm_control's smooth swing-up reward (in ``[0, 1]``; an agent step
sums ``action_repeat`` of them), ``upright * centered * small_control * small_velocity`` with
- ``upright = (1 + cos theta) / 2``,
- ``centered = (1 + tolerance(x, margin=2)) / 2`` (gaussian, 0.1 at 2 m),
- ``small_control = (4 + tolerance(u, margin=1, value_at_margin=0, sigmoid="quadratic")) / 5``,
- ``small_velocity = (1 + tolerance(theta', margin=5)) / 2`` (gaussian, 0.1 at 5 rad/s);
1 exactly when the pole is upright at rest over the centre with ``u = 0``.
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lab.envs import render
from lab.envs.rewards import tolerance
from lab.envs.task import PixelTask

_VIEW_CENTER = (0.0, 0.2)
_VIEW_HALF_EXTENT = 2.2
_CART_HALF_SIZE = (0.25, 0.125)
_RAIL_COLOR = (0.25, 0.25, 0.25)
_CART_COLOR = (0.20, 0.35, 0.70)
_POLE_COLOR = (0.85, 0.55, 0.20)


class CartpoleState(NamedTuple):
    x: jax.Array
    """Cart position in metres."""
    x_dot: jax.Array
    theta: jax.Array
    """Pole angle from upright in radians (unwrapped)."""
    theta_dot: jax.Array
    t: jax.Array
    """Agent steps taken in this episode (int32)."""


@dataclasses.dataclass(frozen=True)
class CartpoleSwingup(PixelTask):
    """Cart-pole swing-up with ``(image_size, image_size, 3)`` uint8 frames as observations."""

    image_size: int = 84
    """Side of the square rendered frame, in pixels (at least ``render.MIN_IMAGE_SIZE``)."""
    action_repeat: int = 8
    """Physics steps per agent step (8 as in SAC-AE); the agent's reward is their sum."""
    physics_steps: int = 1000
    """Physics steps per episode; an episode has ``physics_steps // action_repeat`` agent steps."""
    dt: float = 0.01
    """Physics time step in seconds."""
    gravity: float = 9.81
    cart_mass: float = 1.0
    pole_mass: float = 0.1
    half_length: float = 0.5
    """Half the pole's length (its centre of mass), in metres."""
    max_force: float = 10.0
    """Force in newtons applied for the action ``u = 1``."""
    rail_limit: float = 1.8
    """The cart stops dead at ``|x| = rail_limit``."""

    def reset(self, key):
        """A new episode with the pole hanging down, all coordinates slightly perturbed."""
        x, x_dot, dtheta, theta_dot = 0.01 * jax.random.normal(key, (4,))
        state = CartpoleState(x, x_dot, jnp.pi + dtheta, theta_dot, jnp.zeros((), jnp.int32))
        return state, self.render(state)

    def accelerations(self, theta, theta_dot, force):
        """``(x'', theta'')`` from the Barto-Sutton equations (module docstring)."""
        total = self.cart_mass + self.pole_mass
        sin, cos = jnp.sin(theta), jnp.cos(theta)
        push = (force + self.pole_mass * self.half_length * theta_dot**2 * sin) / total
        theta_acc = (self.gravity * sin - cos * push) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos**2 / total))
        x_acc = push - self.pole_mass * self.half_length * theta_acc * cos / total
        return x_acc, theta_acc

    def physics_step(self, x, x_dot, theta, theta_dot, u):
        """One semi-implicit Euler step under the force ``max_force * u``, then the walls."""
        x_acc, theta_acc = self.accelerations(theta, theta_dot, self.max_force * u)
        x_dot = x_dot + self.dt * x_acc
        theta_dot = theta_dot + self.dt * theta_acc
        x = x + self.dt * x_dot
        theta = theta + self.dt * theta_dot
        at_wall = jnp.abs(x) >= self.rail_limit
        x = jnp.clip(x, -self.rail_limit, self.rail_limit)
        x_dot = jnp.where(at_wall & (x * x_dot > 0), 0.0, x_dot)
        return x, x_dot, theta, theta_dot

    def energy(self, x, x_dot, theta, theta_dot):
        """Kinetic plus potential energy (zero at the rail's height), in joules."""
        m, half = self.pole_mass, self.half_length
        kinetic = 0.5 * self.cart_mass * x_dot**2 + 0.5 * m * (
            x_dot**2 + 2.0 * half * x_dot * theta_dot * jnp.cos(theta) + half**2 * theta_dot**2)
        rotation = 0.5 * (m * half**2 / 3.0) * theta_dot**2  # a uniform rod about its centre
        return kinetic + rotation + m * self.gravity * half * jnp.cos(theta)

    def momentum(self, x_dot, theta, theta_dot):
        """Horizontal momentum of cart and pole; conserved without force and walls."""
        total = self.cart_mass + self.pole_mass
        return total * x_dot + self.pole_mass * self.half_length * theta_dot * jnp.cos(theta)

    def reward(self, x, x_dot, theta, theta_dot, u):
        """Reward of one physics step, in ``[0, 1]`` (see the module docstring)."""
        del x_dot
        upright = (1.0 + jnp.cos(theta)) / 2.0
        centered = (1.0 + tolerance(x, margin=2.0)) / 2.0
        small_control = (4.0 + tolerance(
            u, margin=1.0, value_at_margin=0.0, sigmoid="quadratic")) / 5.0
        small_velocity = (1.0 + tolerance(theta_dot, margin=5.0)) / 2.0
        return upright * centered * small_control * small_velocity

    def render(self, state: CartpoleState):
        """The scene as ``(image_size, image_size, 3)`` uint8: sky, striped ground, rail,
        cart and pole."""
        xs, ys, pixel = render.pixel_grid(self.image_size, _VIEW_CENTER, _VIEW_HALF_EXTENT)
        canvas = render.background(xs, ys, pixel, horizon=-1.35, stripe=0.5)
        rail = render.box_sdf(xs, ys, (0.0, 0.0), (self.rail_limit + 0.3, 0.5 * pixel))
        canvas = render.paint(canvas, render.coverage(rail, pixel), _RAIL_COLOR)
        cart = render.box_sdf(xs, ys, (state.x, 0.0), _CART_HALF_SIZE)
        canvas = render.paint(canvas, render.coverage(cart, pixel), _CART_COLOR)
        length = 2.0 * self.half_length
        tip = (state.x + length * jnp.sin(state.theta), length * jnp.cos(state.theta))
        pole = render.segment_sdf(xs, ys, (state.x, 0.0), tip, max(0.06, 0.7 * pixel))
        canvas = render.paint(canvas, render.coverage(pole, pixel), _POLE_COLOR)
        return render.to_uint8(canvas)
