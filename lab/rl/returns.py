"""Bootstrapped n-step returns of a rollout, cut where episodes end.

Shared by the on-policy actor-critics: V-MPO (``lab.train.vmpo``) and A3C / GA3C
(``lab.rl.a3c``). A terminal step's reward counts and nothing is bootstrapped after it
(``discount_t = 0``); a truncated episode (the time limit) is bootstrapped from the value of
the observation it ended in, which gymnax's auto-reset reports as the final observation; the
rollout's last step is bootstrapped from the value of the state after it.
"""

import jax
import jax.numpy as jnp


def bootstrapped_returns(r_t: jax.Array, discount_t: jax.Array, end_t: jax.Array,
                         v_tp1: jax.Array) -> jax.Array:
    """The n-step returns to the end of a rollout, cut where an episode ends.

    ``G_t = r_t + discount_t * (v_tp1[t] if end_t or t is the last step else G_{t+1})``.

    Args:
      r_t: ``(T, ...)`` rewards.
      discount_t: ``(T, ...)`` ``gamma * (1 - terminated_t)``: 0 on termination.
      end_t: ``(T, ...)`` bool, the episode ended at ``t`` (terminated or truncated).
      v_tp1: ``(T, ...)`` the value of the true next observation of step ``t`` (before any
        reset); it is used where the episode ended and at the last step. No gradient flows.

    Returns ``(T, ...)`` returns ``G_t``.
    """
    if not r_t.shape == discount_t.shape == end_t.shape == v_tp1.shape:
        raise ValueError(f"shapes disagree: r_t {r_t.shape}, discount_t {discount_t.shape}, "
                         f"end_t {end_t.shape}, v_tp1 {v_tp1.shape}")
    v_tp1 = jax.lax.stop_gradient(v_tp1)

    def backward(g_tp1, step):
        r, discount, end, v = step
        g = r + discount * jnp.where(end, v, g_tp1)
        return g, g

    _, returns = jax.lax.scan(backward, v_tp1[-1], (r_t, discount_t, end_t, v_tp1),
                              reverse=True)
    return returns
