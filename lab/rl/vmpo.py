"""V-MPO's policy loss: on-policy MPO with a learned state value.

Song et al. 2019, "V-MPO: On-Policy Maximum a Posteriori Policy Optimization for Discrete and
Continuous Control" (arXiv:1909.12238); the same conventions as rlax's ``vmpo_loss``.

Given advantages ``A = G_n - V(s)`` of the batch's ``(s, a)`` pairs (from the policy that
collected them, the old policy), V-MPO keeps the top half of the batch by advantage and
weights those pairs by ``softmax(A / eta)`` over that half; all other pairs get weight 0. The
temperature minimises

    eta * epsilon_eta + eta * log(mean_{top half} exp(A / eta)),

and the policy is fitted by weighted maximum likelihood under the same decoupled Gaussian KL
constraints as MPO (``lab.rl.mpo.m_step_loss``), averaged over the whole batch. There is no
entropy bonus.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lab.rl.mpo import Duals, MStepAux, dual, m_step_loss


class VMPOAux(NamedTuple):
    temperature: jax.Array
    selected: jax.Array
    """``(B,)`` 1.0 for the pairs in the top half by advantage, else 0.0."""
    weights: jax.Array
    """``(B,)`` weights, summing to 1 over the selected half."""
    m_step: MStepAux


def top_half(advantages: jax.Array) -> jax.Array:
    """``(B,)`` mask (1.0 / 0.0) of exactly ``B // 2`` pairs with the largest advantages
    (ties broken by position)."""
    (b,) = advantages.shape
    k = b // 2
    if k < 1:
        raise ValueError(f"V-MPO needs a batch of at least 2 to keep its top half, got {b}")
    _, index = jax.lax.top_k(advantages, k)
    return jnp.zeros((b,)).at[index].set(1.0)


def vmpo_loss(advantages: jax.Array, actions: jax.Array, mean: jax.Array, stddev: jax.Array,
              mean_old: jax.Array, stddev_old: jax.Array, duals: Duals, *,
              epsilon_eta: float = 0.01, epsilon_mean: float = 0.01,
              epsilon_stddev: float = 5e-5) -> tuple[jax.Array, VMPOAux]:
    """V-MPO's policy and dual loss for a flat batch.

    Args:
      advantages: ``(B,)`` ``G_n - V(s)``; no gradient flows into them.
      actions: ``(B, D)`` the actions taken.
      mean, stddev: ``(B, D)`` the online policy; ``mean_old, stddev_old`` the old policy.
      duals: the temperature and the KL multipliers (``lab.rl.mpo.Duals``).

    Returns ``(loss, aux)``: temperature loss + weighted NLL + KL terms + multiplier losses.
    """
    (b,) = advantages.shape
    if actions.shape[0] != b or mean.shape != actions.shape:
        raise ValueError(f"shapes disagree: advantages {advantages.shape}, actions "
                         f"{actions.shape}, mean {mean.shape}")
    advantages = jax.lax.stop_gradient(advantages)
    selected = top_half(advantages)
    eta = dual(duals.temperature)
    k = b // 2
    # -inf logits outside the top half, set after the division so that no gradient is inf * 0
    logits = jnp.where(selected > 0, advantages / eta, -jnp.inf)
    temperature_loss = eta * epsilon_eta + eta * (jax.nn.logsumexp(logits) - math.log(k))
    weights = jax.nn.softmax(jax.lax.stop_gradient(logits))
    m_loss, m_aux = m_step_loss(weights[:, None], actions[:, None], mean, stddev, mean_old,
                                stddev_old, duals.alpha_mean, duals.alpha_stddev,
                                epsilon_mean, epsilon_stddev)
    aux = VMPOAux(jax.lax.stop_gradient(eta), selected, weights, m_aux)
    return temperature_loss + m_loss, aux
