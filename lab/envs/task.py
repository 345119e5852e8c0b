"""What the JAX pixel tasks share: sizes, episode length and the agent step.

A task is a frozen dataclass with ``image_size``, ``action_repeat`` and ``physics_steps``
fields, a NamedTuple state whose last field is ``t`` (agent steps taken) and whose other
fields are the physical coordinates, and three methods: ``physics_step(*coords, u) ->
coords``, ``reward(*coords, u)`` for one physics step, and ``render(state)``. ``PixelTask``
turns them into the gymnax-style ``step``.
"""

import jax
import jax.numpy as jnp

from lab.envs import render


class PixelTask:
    """Mixin of the JAX pixel tasks (see the module docstring)."""

    def __post_init__(self):
        render.check_sizes(self.image_size, self.action_repeat, self.physics_steps)

    @property
    def episode_steps(self) -> int:
        """Agent steps per episode."""
        return self.physics_steps // self.action_repeat

    @property
    def action_size(self) -> int:
        return 1

    def step(self, state, action, key):
        """``action_repeat`` physics steps with ``u = clip(action, -1, 1)`` (shape ``()`` or
        ``(1,)``): ``(state, obs, reward, done)``, the reward summed over the physics steps;
        ``done`` once ``episode_steps`` are taken. The dynamics are deterministic; ``key`` is
        accepted for a uniform interface.
        """
        del key
        u = jnp.clip(jnp.reshape(action, ()).astype(jnp.float32), -1.0, 1.0)

        def physics(coords, _):
            coords = self.physics_step(*coords, u)
            return coords, self.reward(*coords, u)

        coords, rewards = jax.lax.scan(physics, tuple(state[:-1]), length=self.action_repeat)
        state = type(state)(*coords, state.t + 1)
        return state, self.render(state), rewards.sum(), state.t >= self.episode_steps
