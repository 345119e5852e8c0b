"""Networks of the policy-improvement agents (MPO, V-MPO, search): one example per call.

The torso is Acme's "layer-norm MLP": a Linear layer, LayerNorm and tanh, then ELU layers.
``GaussianPolicy`` returns a diagonal Gaussian's ``(mean, stddev)``; the agents clip sampled
actions to ``[-1, 1]`` before the environment and the critic see them. ``QCritic`` is
``Q(s, a)``, ``ValueCritic`` is ``V(s)``, and ``DynamicsModel`` is a learned model
``(s, a) -> (s', r)`` for search, predicting the change of the observation.
"""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp


class Torso(eqx.Module):
    """Linear -> LayerNorm -> tanh, then (Linear -> ELU) for each further width."""

    first: eqx.nn.Linear
    norm: eqx.nn.LayerNorm
    rest: tuple[eqx.nn.Linear, ...]

    def __init__(self, in_size: int, widths: Sequence[int], *, key: jax.Array):
        if not widths or min(widths) < 1:
            raise ValueError(f"a torso needs at least one width >= 1, got {tuple(widths)}")
        keys = jax.random.split(key, len(widths))
        self.first = eqx.nn.Linear(in_size, widths[0], key=keys[0])
        self.norm = eqx.nn.LayerNorm(widths[0])
        self.rest = tuple(eqx.nn.Linear(a, b, key=k)
                          for a, b, k in zip(widths[:-1], widths[1:], keys[1:], strict=True))

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(self.norm(self.first(x)))
        for layer in self.rest:
            x = jax.nn.elu(layer(x))
        return x


def _small_head(in_size: int, out_size: int, scale: float, key: jax.Array) -> eqx.nn.Linear:
    """A Linear head with weights scaled by ``scale`` (small initial outputs)."""
    head = eqx.nn.Linear(in_size, out_size, key=key)
    return eqx.tree_at(lambda h: h.weight, head, head.weight * scale)


class GaussianPolicy(eqx.Module):
    """``obs -> (mean, stddev)`` of a diagonal Gaussian over ``action_dim`` actions.

    ``stddev = softplus(x) * init_stddev / softplus(0) + min_stddev``, so that a fresh policy
    starts near ``init_stddev`` (Acme's ``init_scale``, 0.7 in its MPO agents).
    """

    torso: Torso
    mean_head: eqx.nn.Linear
    stddev_head: eqx.nn.Linear
    init_stddev: float = eqx.field(static=True)
    min_stddev: float = eqx.field(static=True)

    def __init__(self, obs_dim: int, action_dim: int, widths: Sequence[int] = (256, 256), *,
                 init_stddev: float = 0.7, min_stddev: float = 1e-6, key: jax.Array):
        k_torso, k_mean, k_stddev = jax.random.split(key, 3)
        self.torso = Torso(obs_dim, widths, key=k_torso)
        self.mean_head = _small_head(widths[-1], action_dim, 1e-2, k_mean)
        self.stddev_head = _small_head(widths[-1], action_dim, 1e-2, k_stddev)
        self.init_stddev = init_stddev
        self.min_stddev = min_stddev

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = self.torso(obs)
        scale = self.init_stddev / jax.nn.softplus(0.0)
        stddev = jax.nn.softplus(self.stddev_head(h)) * scale + self.min_stddev
        return self.mean_head(h), stddev


def sample_actions(policy: GaussianPolicy, obs: jax.Array, key: jax.Array, n: int
                   ) -> jax.Array:
    """``(n, action_dim)`` actions sampled from ``policy`` at one observation (unclipped)."""
    mean, stddev = policy(obs)
    return mean + stddev * jax.random.normal(key, (n, mean.shape[0]))


class QCritic(eqx.Module):
    """``(obs, action) -> Q(s, a)``, a scalar."""

    torso: Torso
    head: eqx.nn.Linear

    def __init__(self, obs_dim: int, action_dim: int, widths: Sequence[int] = (256, 256), *,
                 key: jax.Array):
        k_torso, k_head = jax.random.split(key)
        self.torso = Torso(obs_dim + action_dim, widths, key=k_torso)
        self.head = eqx.nn.Linear(widths[-1], 1, key=k_head)

    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        return self.head(self.torso(jnp.concatenate([obs, action])))[0]


class ValueCritic(eqx.Module):
    """``obs -> V(s)``, a scalar."""

    torso: Torso
    head: eqx.nn.Linear

    def __init__(self, obs_dim: int, widths: Sequence[int] = (256, 256), *, key: jax.Array):
        k_torso, k_head = jax.random.split(key)
        self.torso = Torso(obs_dim, widths, key=k_torso)
        self.head = eqx.nn.Linear(widths[-1], 1, key=k_head)

    def __call__(self, obs: jax.Array) -> jax.Array:
        return self.head(self.torso(obs))[0]


class DynamicsModel(eqx.Module):
    """A learned model ``(obs, action) -> (next_obs, reward)``; it predicts ``next_obs - obs``.

    Trained by regression on replayed transitions (``lab.train.mpo``); ``search`` then steps it
    like the true environment, with the observation as the state and no termination.
    """

    torso: Torso
    head: eqx.nn.Linear

    def __init__(self, obs_dim: int, action_dim: int, widths: Sequence[int] = (256, 256), *,
                 key: jax.Array):
        k_torso, k_head = jax.random.split(key)
        self.torso = Torso(obs_dim + action_dim, widths, key=k_torso)
        self.head = eqx.nn.Linear(widths[-1], obs_dim + 1, key=k_head)

    def __call__(self, obs: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = self.head(self.torso(jnp.concatenate([obs, jnp.clip(action, -1.0, 1.0)])))
        return obs + out[:-1], out[-1]
