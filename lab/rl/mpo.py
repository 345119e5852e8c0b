"""KL-regularised policy improvement: MPO's E-step, temperature dual and decoupled M-step.

Abdolmaleki et al. 2018, "Maximum a Posteriori Policy Optimisation" (arXiv:1806.06920) and
"Relative Entropy Regularized Policy Iteration" (arXiv:1812.02256); the same conventions as
rlax's ``mpo_loss`` and Acme's JAX MPO agent.

E-step. For each state ``s`` the improved, non-parametric policy is
``q(a|s) ∝ pi_old(a|s) exp(Q(s,a)/eta)``. With ``N`` actions sampled from ``pi_old`` its
weights are ``softmax_N(Q/eta)``, and the temperature ``eta`` minimises the dual

    g(eta) = eta * epsilon + eta * mean_s [logsumexp_N(Q(s, a_j)/eta) - log N],

which keeps ``KL(q || pi_old)`` at about ``epsilon`` per state.

M-step. Weighted maximum likelihood ``-sum_j w_j log pi(a_j|s)`` under KL trust regions,
decoupled for a diagonal Gaussian into a mean part, ``pi_mu = N(mu, sigma_old)``, and a
standard-deviation part, ``pi_sigma = N(mu_old, sigma)``, whose log-likelihoods are summed:

    KL_mu    = 1/2 sum_d ((mu - mu_old) / sigma_old)^2                    (KL(pi_old || pi_mu))
    KL_sigma = sum_d [log(sigma / sigma_old) + sigma_old^2 / (2 sigma^2) - 1/2]   (|| pi_sigma)

Each constraint has a Lagrange multiplier ``alpha`` (one per action dimension by default)
learned by its own loss ``alpha * (epsilon - stop_gradient(KL))`` while the policy pays
``stop_gradient(alpha) * KL``. The duals (``eta`` and the ``alpha``) are kept as
unconstrained parameters and mapped through ``softplus(x) + 1e-8``, so they stay positive.

Conventions: KLs are averaged over states; the weighted log-likelihood is divided by the
total weight, which is the number of states for MPO's per-state weights and 1 for V-MPO's
batch-normalised weights (``lab.rl.vmpo``), so both share ``m_step_loss``. Losses are to be
minimised; each returns ``(loss, aux)``.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

MIN_DUAL = 1e-8
"""Added to ``softplus`` so that a dual can never reach 0."""


def dual(x: jax.Array) -> jax.Array:
    """The positive value of an unconstrained dual parameter: ``softplus(x) + 1e-8``."""
    return jax.nn.softplus(x) + MIN_DUAL


def inverse_dual(value: float) -> float:
    """The unconstrained parameter whose ``dual`` is ``value`` (for initialisation)."""
    value = float(value) - MIN_DUAL
    if value <= 0:
        raise ValueError(f"a dual's initial value must be > {MIN_DUAL}, got {value}")
    return value + math.log(-math.expm1(-value))  # log(exp(value) - 1), stable


class Duals(NamedTuple):
    """Unconstrained dual parameters; ``dual(x)`` gives their positive values."""

    temperature: jax.Array
    """eta of the E-step, a scalar."""
    alpha_mean: jax.Array
    """Multipliers of the mean constraint: ``(action_dim,)``, or ``(1,)`` if not per-dim."""
    alpha_stddev: jax.Array
    """Multipliers of the standard-deviation constraint, shaped like ``alpha_mean``."""


def init_duals(action_dim: int, *, temperature: float = 1.0, alpha_mean: float = 1.0,
               alpha_stddev: float = 10.0, per_dim: bool = True) -> Duals:
    """Duals starting at the given positive values (Acme's defaults: 1, 1, 10)."""
    n = action_dim if per_dim else 1
    return Duals(jnp.asarray(inverse_dual(temperature), jnp.float32),
                 jnp.full((n,), inverse_dual(alpha_mean), jnp.float32),
                 jnp.full((n,), inverse_dual(alpha_stddev), jnp.float32))


def gaussian_log_prob(x: jax.Array, mean: jax.Array, stddev: jax.Array) -> jax.Array:
    """``log N(x; mean, diag(stddev^2))`` summed over the last axis (broadcasting)."""
    z = (x - mean) / stddev
    return jnp.sum(-0.5 * z**2 - jnp.log(stddev) - 0.5 * math.log(2 * math.pi), axis=-1)


class EStepAux(NamedTuple):
    temperature: jax.Array
    """eta, the positive temperature."""
    kl_q: jax.Array
    """``KL(q || pi_old)`` of the sample-based improved policy, averaged over states
    (``sum_j w_j log(N w_j)``); about ``epsilon`` once ``eta`` has converged."""
    q_mean: jax.Array


def e_step(q_values: jax.Array, temperature_param: jax.Array, epsilon: float
           ) -> tuple[jax.Array, jax.Array, EStepAux]:
    """E-step weights and the temperature dual.

    Args:
      q_values: ``(B, N)`` values ``Q(s_b, a_bj)`` of ``N`` actions per state, the actions
        sampled from the old (target) policy.
      temperature_param: the unconstrained temperature (``Duals.temperature``).
      epsilon: the E-step KL bound, > 0.

    Returns ``(weights, dual_loss, aux)``: ``weights`` is ``(B, N)``, ``softmax`` over ``N``
    of ``Q / eta``, with no gradient to the Q-values or to eta; ``dual_loss`` is ``g(eta)``,
    whose gradient reaches only the temperature.
    """
    if q_values.ndim != 2:
        raise ValueError(f"q_values must be (batch, actions), got shape {q_values.shape}")
    q_values = jax.lax.stop_gradient(q_values)
    eta = dual(temperature_param)
    n = q_values.shape[1]
    log_z = jax.nn.logsumexp(q_values / eta, axis=1) - math.log(n)
    dual_loss = eta * epsilon + eta * jnp.mean(log_z)
    logits = q_values / jax.lax.stop_gradient(eta)
    weights = jax.nn.softmax(logits, axis=1)
    log_w = jax.nn.log_softmax(logits, axis=1)
    kl_q = jnp.mean(jnp.sum(weights * (log_w + math.log(n)), axis=1))
    return weights, dual_loss, EStepAux(jax.lax.stop_gradient(eta), kl_q, jnp.mean(q_values))


class MStepAux(NamedTuple):
    kl_mean: jax.Array
    """Realised ``KL_mu`` per constrained dimension, averaged over states."""
    kl_stddev: jax.Array
    """Realised ``KL_sigma`` per constrained dimension, averaged over states."""
    alpha_mean: jax.Array
    alpha_stddev: jax.Array
    nll: jax.Array
    """The weighted negative log-likelihood of the two decoupled Gaussians."""


def m_step_loss(weights: jax.Array, actions: jax.Array, mean: jax.Array, stddev: jax.Array,
                mean_old: jax.Array, stddev_old: jax.Array, alpha_mean_param: jax.Array,
                alpha_stddev_param: jax.Array, epsilon_mean: float, epsilon_stddev: float
                ) -> tuple[jax.Array, MStepAux]:
    """Decoupled weighted maximum likelihood with KL trust regions and their multipliers.

    Args:
      weights: ``(B, N)`` non-negative target weights (no gradient flows into them).
      actions: ``(B, N, D)`` the weighted actions.
      mean, stddev: ``(B, D)`` the online policy's Gaussian.
      mean_old, stddev_old: ``(B, D)`` the old (target) policy's Gaussian (stop-gradient).
      alpha_mean_param, alpha_stddev_param: unconstrained multipliers, ``(D,)`` for
        per-dimension constraints or ``(1,)`` for one constraint on the summed KL.
      epsilon_mean, epsilon_stddev: the KL bounds, > 0.

    Returns ``(loss, aux)``. ``loss`` is the policy's weighted NLL plus
    ``stop_gradient(alpha) * KL`` plus the multipliers' ``alpha * (epsilon - sg(KL))``.
    """
    b, n, d = actions.shape
    if weights.shape != (b, n) or mean.shape != (b, d) or stddev.shape != (b, d):
        raise ValueError(f"shapes disagree: weights {weights.shape}, actions {actions.shape}, "
                         f"mean {mean.shape}, stddev {stddev.shape}")
    if alpha_mean_param.shape not in ((d,), (1,)):
        raise ValueError(f"multipliers must be ({d},) or (1,), got {alpha_mean_param.shape}")
    weights = jax.lax.stop_gradient(weights)
    mean_old, stddev_old = jax.lax.stop_gradient(mean_old), jax.lax.stop_gradient(stddev_old)

    log_p_mean = gaussian_log_prob(actions, mean[:, None], stddev_old[:, None])
    log_p_stddev = gaussian_log_prob(actions, mean_old[:, None], stddev[:, None])
    nll = -jnp.sum(weights * (log_p_mean + log_p_stddev)) / jnp.sum(weights)

    kl_mean = jnp.mean(0.5 * ((mean - mean_old) / stddev_old) ** 2, axis=0)
    kl_stddev = jnp.mean(jnp.log(stddev / stddev_old) + stddev_old**2 / (2 * stddev**2) - 0.5,
                         axis=0)
    if alpha_mean_param.shape == (1,):
        kl_mean, kl_stddev = jnp.sum(kl_mean, keepdims=True), jnp.sum(kl_stddev, keepdims=True)
    alpha_mean, alpha_stddev = dual(alpha_mean_param), dual(alpha_stddev_param)
    sg = jax.lax.stop_gradient
    policy_kl = jnp.sum(sg(alpha_mean) * kl_mean) + jnp.sum(sg(alpha_stddev) * kl_stddev)
    alpha_loss = (jnp.sum(alpha_mean * (epsilon_mean - sg(kl_mean)))
                  + jnp.sum(alpha_stddev * (epsilon_stddev - sg(kl_stddev))))
    aux = MStepAux(sg(kl_mean), sg(kl_stddev), sg(alpha_mean), sg(alpha_stddev), sg(nll))
    return nll + policy_kl + alpha_loss, aux


class MPOAux(NamedTuple):
    e_step: EStepAux
    m_step: MStepAux


def mpo_loss(q_values: jax.Array, actions: jax.Array, mean: jax.Array, stddev: jax.Array,
             mean_old: jax.Array, stddev_old: jax.Array, duals: Duals, *, epsilon: float = 0.1,
             epsilon_mean: float = 2.5e-3, epsilon_stddev: float = 1e-6
             ) -> tuple[jax.Array, MPOAux]:
    """MPO's policy-improvement loss: E-step weights and temperature dual, then the decoupled
    M-step. ``q_values`` is ``(B, N)`` for the ``(B, N, D)`` ``actions`` sampled from the old
    policy; the Gaussians are ``(B, D)``. The gradient reaches the policy's ``mean`` and
    ``stddev`` and the three duals, never the Q-values."""
    weights, dual_loss, e_aux = e_step(q_values, duals.temperature, epsilon)
    m_loss, m_aux = m_step_loss(weights, actions, mean, stddev, mean_old, stddev_old,
                                duals.alpha_mean, duals.alpha_stddev, epsilon_mean,
                                epsilon_stddev)
    return dual_loss + m_loss, MPOAux(e_aux, m_aux)
