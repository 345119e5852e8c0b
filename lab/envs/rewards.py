"""Smooth bounded rewards in the style of the DeepMind Control Suite (``dm_control.utils.rewards``).

Tassa et al. 2018, "DeepMind Control Suite", https://arxiv.org/abs/1801.00690.
"""

import math

import jax.numpy as jnp


def tolerance(x, *, lower=0.0, upper=0.0, margin=0.0, sigmoid="gaussian", value_at_margin=0.1):
    """1 inside ``[lower, upper]``, decaying with the distance ``d`` outside it.

    With ``margin == 0`` this is the indicator of the bounds. Otherwise ``s = d / margin`` and
    - ``"gaussian"``: ``exp(-s^2 * ln(1 / value_at_margin))``, so the value is
      ``value_at_margin`` at distance ``margin``;
    - ``"quadratic"``: ``max(0, 1 - (1 - value_at_margin) * s^2)``, zero from distance
      ``margin / sqrt(1 - value_at_margin)`` on.
    Always in ``[0, 1]``; ``sigmoid``, ``margin`` and ``value_at_margin`` are Python constants.
    """
    x = jnp.asarray(x)
    in_bounds = (lower <= x) & (x <= upper)
    if margin == 0:
        return in_bounds.astype(jnp.float32)
    s = jnp.where(x < lower, lower - x, x - upper) / margin
    if sigmoid == "gaussian":
        value = jnp.exp(-(s**2) * math.log(1.0 / value_at_margin))
    elif sigmoid == "quadratic":
        value = jnp.maximum(0.0, 1.0 - (1.0 - value_at_margin) * s**2)
    else:
        raise ValueError(f"sigmoid must be 'gaussian' or 'quadratic', got {sigmoid!r}")
    return jnp.where(in_bounds, 1.0, value)
