"""Local soft tree search for continuous actions: KL-regularised lookahead with a model.

Springenberg et al. 2020, "Local Search for Policy Iteration in Continuous Control"
(arXiv:2010.05545). From a state, sample actions from the policy (``N`` at the root, ``M``
at every node below it), step a model (the true environment, by copying its state, or a learned
one), recurse to depth ``d``, bootstrap the leaves with the learned critic, and back up softly:

    Q_hat_0(s, a) = Q(s, a)                                      (the critic)
    Q_hat_d(s, a) = r(s, a) + gamma * discount(s, a) * V_hat_{d-1}(s')
    V_hat_k(s)    = eta * log(mean_j exp(Q_hat_k(s, a_j) / eta)),   a_j ~ pi(.|s), j = 1..M

The root's ``softmax(Q_hat_d / eta)`` over its ``N`` actions is the improved policy ``q``: the
M-step's targets in learning and, when searching to act, the distribution the executed action
is drawn from. At depth 0 this is exactly MPO's E-step (``N`` actions from the old policy,
valued by the critic). The soft backup is the value of the KL-regularised one-step problem
``max_q E_q[Q] - eta KL(q || pi)`` under the sampled ``pi``.

The tree has ``N M^(d-1)`` model steps and ``N M^d`` critic evaluations per root (``N`` at
depth 0); keeping ``M`` below ``N`` keeps deep searches affordable. The recursion is
unrolled at trace time (``depth`` is a Python int) and each level is a ``jax.vmap``.
"""

import math
from collections.abc import Callable
from typing import Any

import jax

SampleFn = Callable[[jax.Array, jax.Array, int], jax.Array]
"""``(obs, key, n) -> (n, D)`` actions from the policy at one observation."""
CriticFn = Callable[[jax.Array, jax.Array], jax.Array]
"""``(obs, actions (M, D)) -> (M,)`` critic values."""
ModelFn = Callable[[Any, jax.Array, jax.Array], tuple[Any, jax.Array, jax.Array]]
"""``(state, action, key) -> (next_state, reward, discount)`` for one state and action;
``discount`` is 0.0 at a terminal state, else 1.0."""
ObserveFn = Callable[[Any], jax.Array]
"""``state -> obs``."""


def soft_value(q_values: jax.Array, temperature: jax.Array) -> jax.Array:
    """``eta * log(mean_j exp(Q_j / eta))`` over the last axis: the soft backup."""
    n = q_values.shape[-1]
    return temperature * (jax.nn.logsumexp(q_values / temperature, axis=-1) - math.log(n))


def search(state: Any, key: jax.Array, *, depth: int, num_actions: int, branching: int,
           temperature: jax.Array, gamma: float, sample: SampleFn, critic: CriticFn,
           model: ModelFn, observe: ObserveFn) -> tuple[jax.Array, jax.Array]:
    """Soft search from one state: ``(actions (N, D), q_hat (N,))`` at the root.

    ``sample`` draws ``num_actions`` (N) actions at the root and ``branching`` (M) at every
    node below it, ``critic`` values the leaves, and ``model`` steps a state. At ``depth`` 0 the
    key goes to ``sample`` unchanged, so the result equals ``sample(observe(state), key, N)``
    valued by ``critic``: MPO's E-step samples.
    """
    if depth < 0:
        raise ValueError(f"search depth must be >= 0, got {depth}")
    if depth == 0:
        obs = observe(state)
        actions = sample(obs, key, num_actions)
        return actions, critic(obs, actions)
    k_sample, k_model, k_children = jax.random.split(key, 3)
    actions = sample(observe(state), k_sample, num_actions)
    next_states, rewards, discounts = jax.vmap(model, in_axes=(None, 0, 0))(
        state, actions, jax.random.split(k_model, num_actions))

    def child_value(child_state, child_key):
        _, q_child = search(child_state, child_key, depth=depth - 1, num_actions=branching,
                            branching=branching, temperature=temperature, gamma=gamma,
                            sample=sample, critic=critic, model=model, observe=observe)
        return soft_value(q_child, temperature)

    values = jax.vmap(child_value)(next_states, jax.random.split(k_children, num_actions))
    return actions, rewards + gamma * discounts * values
