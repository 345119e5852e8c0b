"""Pendulum swing-up from pixels, a pure-JAX take on the DeepMind Control Suite task.

Tassa et al. 2018, "DeepMind Control Suite", https://arxiv.org/abs/1801.00690 (the
``pendulum.swingup`` task). A point mass ``m`` on a massless pole of length ``l`` swings about
a hinge with viscous damping ``b``; ``theta`` is measured from upright (``theta = 0`` is up,
``pi`` hangs down, positive is clockwise on screen, tip at ``(l sin theta, l cos theta)``):

    theta'' = (g / l) sin(theta) + (max_torque * u - b theta') / (m l^2),   u in [-1, 1].

The defaults are dm_control's (m = 1, l = 0.5, b = 0.1, max torque 1, dt = 0.02 s,
1000 physics steps = 20 s per episode): gravity's torque (4.9 N m) is five times the motor's,
so the pendulum must be swung up. Integration is semi-implicit (symplectic) Euler.
Unlike dm_control, which starts at a uniformly random angle, an episode starts hanging down,
``theta = pi + 0.05 N(0, 1)``, ``theta' = 0.05 N(0, 1)``.

Reward per physics step (in ``[0, 1]``; an agent step sums ``action_repeat`` of them):
- dense (default): ``upright * small_velocity`` with ``upright = (1 + cos theta) / 2`` and
  ``small_velocity = (1 + tolerance(theta', margin=5)) / 2`` (gaussian, 0.1 at 5 rad/s);
  1 exactly when upright at rest, 0 when hanging down.
- ``sparse=True``: dm_control's ``1[cos theta >= cos 30 deg]``.
"""

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lab.envs import render
from lab.envs.rewards import tolerance
from lab.envs.task import PixelTask

_VIEW_HALF_EXTENT = 0.75
_POLE_COLOR = (0.85, 0.55, 0.20)
_BOB_COLOR = (0.75, 0.15, 0.15)
_PIVOT_COLOR = (0.15, 0.15, 0.15)


class PendulumState(NamedTuple):
    theta: jax.Array
    """Angle from upright in radians (unwrapped)."""
    theta_dot: jax.Array
    """Angular velocity in rad/s."""
    t: jax.Array
    """Agent steps taken in this episode (int32)."""


@dataclasses.dataclass(frozen=True)
class PendulumSwingup(PixelTask):
    """Pendulum swing-up with ``(image_size, image_size, 3)`` uint8 frames as observations."""

    image_size: int = 84
    """Side of the square rendered frame, in pixels (at least ``render.MIN_IMAGE_SIZE``)."""
    action_repeat: int = 4
    """Physics steps per agent step; the agent's reward is their sum."""
    physics_steps: int = 1000
    """Physics steps per episode; an episode has ``physics_steps // action_repeat`` agent steps."""
    dt: float = 0.02
    """Physics time step in seconds."""
    gravity: float = 9.81
    mass: float = 1.0
    length: float = 0.5
    damping: float = 0.1
    """Viscous hinge damping in N m s."""
    max_torque: float = 1.0
    """Torque in N m applied for the action ``u = 1``."""
    sparse: bool = False
    """Use dm_control's sparse reward ``1[cos theta >= cos 30 deg]`` instead of the dense one."""

    def reset(self, key):
        """A new episode hanging down with small noise: ``(state, obs)``."""
        noise = 0.05 * jax.random.normal(key, (2,))
        state = PendulumState(jnp.pi + noise[0], noise[1], jnp.zeros((), jnp.int32))
        return state, self.render(state)

    def physics_step(self, theta, theta_dot, u):
        """One semi-implicit Euler step of the pendulum under the torque ``max_torque * u``."""
        inertia = self.mass * self.length**2
        accel = (self.gravity / self.length) * jnp.sin(theta) + (
            self.max_torque * u - self.damping * theta_dot) / inertia
        theta_dot = theta_dot + self.dt * accel
        return theta + self.dt * theta_dot, theta_dot

    def energy(self, theta, theta_dot):
        """Kinetic plus potential energy (zero at the pivot's height), in joules."""
        return 0.5 * self.mass * (self.length * theta_dot) ** 2 + (
            self.mass * self.gravity * self.length * jnp.cos(theta))

    def reward(self, theta, theta_dot, u=0.0):
        """Reward of one physics step, in ``[0, 1]`` (see the module docstring); the control
        ``u`` does not enter it."""
        del u
        if self.sparse:
            return (jnp.cos(theta) >= math.cos(math.radians(30))).astype(jnp.float32)
        upright = (1.0 + jnp.cos(theta)) / 2.0
        small_velocity = (1.0 + tolerance(theta_dot, margin=5.0)) / 2.0
        return upright * small_velocity

    def render(self, state: PendulumState):
        """The scene as ``(image_size, image_size, 3)`` uint8: sky, ground, pole, bob, pivot."""
        xs, ys, pixel = render.pixel_grid(self.image_size, (0.0, 0.0), _VIEW_HALF_EXTENT)
        tip = (self.length * jnp.sin(state.theta), self.length * jnp.cos(state.theta))
        canvas = render.background(xs, ys, pixel, horizon=-0.62, stripe=0.3)
        radius = max(0.035, 0.7 * pixel)  # at least ~1.4 pixels wide at small sizes
        pole = render.segment_sdf(xs, ys, (0.0, 0.0), tip, radius)
        canvas = render.paint(canvas, render.coverage(pole, pixel), _POLE_COLOR)
        bob = render.circle_sdf(xs, ys, tip, 0.09)
        canvas = render.paint(canvas, render.coverage(bob, pixel), _BOB_COLOR)
        pivot = render.circle_sdf(xs, ys, (0.0, 0.0), max(0.04, 0.8 * pixel))
        canvas = render.paint(canvas, render.coverage(pivot, pixel), _PIVOT_COLOR)
        return render.to_uint8(canvas)

