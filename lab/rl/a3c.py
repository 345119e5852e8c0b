"""The advantage actor-critic loss of A3C, as GA3C uses it.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (A3C); Babaeizadeh,
Frosio, Tyree, Clemons & Kautz, "Reinforcement Learning through Asynchronous Advantage
Actor-Critic on a GPU" (ICLR 2017, GA3C). Every execution in ``lab`` (the jitted A2C, host
GA3C with its queues, the per-agent host A3C) trains with these two functions.

**Returns** are t_max-step returns bootstrapped from V (``lab.rl.returns``):

    G_t = r_t + discount_t * (V(s'_t) if the episode ended at t or t is the last step
                              else G_{t+1}),   discount_t = gamma * (1 - terminated_t)

with ``s'_t`` the observation step t reached before any reset. A terminal step's reward
counts and nothing is bootstrapped after it. (NVlabs' GA3C drops the last reward of an
episode; this does not.)

**Loss**, summed over the batch of ``B`` steps as A3C accumulates its gradients over a
rollout and GA3C sums over a training batch (the paper's step size 3e-4 with RMSProp's
epsilon 0.1 is for sums), advantages ``A = G - V`` with no gradient:

    policy  = -sum(A * log pi(a|s)) - entropy_cost * sum(H(pi(.|s)))
    value   = value_cost * sum((G - V(s))^2)

``log_epsilon > 0`` is GA3C's guard against policy lag: ``log(pi + log_epsilon)`` in place of
``log pi`` (in the entropy too), which bounds the gradient of a probability near zero that
an older policy sampled. With 0 (the default) it is the exact ``log_softmax``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class A3CAux(NamedTuple):
    policy_loss: jax.Array  # including the entropy bonus; summed over the batch
    value_loss: jax.Array  # summed over the batch
    entropy: jax.Array  # mean entropy of pi over the batch
    advantage: jax.Array  # mean advantage G - V


def log_policy(logits: jax.Array, log_epsilon: float = 0.0) -> jax.Array:
    """``log pi`` from logits, or GA3C's ``log(pi + log_epsilon)``."""
    if log_epsilon == 0.0:
        return jax.nn.log_softmax(logits, axis=-1)
    return jnp.log(jax.nn.softmax(logits, axis=-1) + log_epsilon)


def a3c_loss(logits_t: jax.Array, v_t: jax.Array, a_t: jax.Array, g_t: jax.Array,
             mask_t: jax.Array | None = None, *, entropy_cost: float = 0.01,
             value_cost: float = 0.5, log_epsilon: float = 0.0) -> tuple[jax.Array, A3CAux]:
    """The A3C loss of a flat batch.

    Args:
      logits_t: ``(B, A)`` policy logits; ``v_t``: ``(B,)`` state values.
      a_t: ``(B,)`` the actions taken (int); ``g_t``: ``(B,)`` their returns
        (``lab.rl.returns.bootstrapped_returns``), no gradient.
      mask_t: ``(B,)`` 1 for the steps that count, 0 for padding (a batch padded to a
        compiled size); None counts every step.

    Returns ``(policy + value loss, aux)``.
    """
    b, _ = logits_t.shape
    if v_t.shape != (b,) or a_t.shape != (b,) or g_t.shape != (b,):
        raise ValueError(f"a3c_loss needs logits (B, A) and (B,) values, actions and returns; "
                         f"got {logits_t.shape}, {v_t.shape}, {a_t.shape}, {g_t.shape}")
    mask_t = jnp.ones((b,)) if mask_t is None else mask_t
    g_t = jax.lax.stop_gradient(g_t)
    advantage = jax.lax.stop_gradient(g_t - v_t)
    log_pi = log_policy(logits_t, log_epsilon)
    log_pi_a = jnp.take_along_axis(log_pi, a_t[:, None], axis=-1)[:, 0]
    entropy_t = -jnp.sum(jax.nn.softmax(logits_t, axis=-1) * log_pi, axis=-1)
    policy = -jnp.sum(mask_t * (advantage * log_pi_a + entropy_cost * entropy_t))
    value = value_cost * jnp.sum(mask_t * (g_t - v_t) ** 2)
    steps = jnp.maximum(mask_t.sum(), 1.0)
    return policy + value, A3CAux(policy, value, jnp.sum(mask_t * entropy_t) / steps,
                                  jnp.sum(mask_t * advantage) / steps)


def rmsprop(learning_rate: float = 3e-4, decay: float = 0.99,
            eps: float = 0.1) -> optax.GradientTransformation:
    """GA3C's RMSProp (TensorFlow's, no momentum, centered off): ``lr * g / sqrt(nu + eps)``
    with ``nu`` the decaying mean of ``g^2`` started at 0. optax puts ``eps`` inside the
    square root, as TensorFlow does, when ``eps_in_sqrt`` is True (its default; said here
    because the placement matters at GA3C's large eps of 0.1)."""
    return optax.rmsprop(learning_rate, decay=decay, eps=eps, eps_in_sqrt=True)
