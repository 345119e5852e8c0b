"""The host loop shared by the policy-improvement agents: seeds in parallel, timed intervals.

An agent provides three pure functions of one seed's run state: ``init(key) -> run``,
``interval(run, first_step) -> (run, metrics)`` (the environment steps and updates between
two evaluations, one ``lax.scan``; ``first_step`` is the environment step the interval starts
at, the same for all seeds and not vmapped, so a ``lax.cond`` on it really skips a branch)
and ``evaluate(run) -> (run, mean_return)``. ``run_seeds`` vmaps them over seeds, compiles
them once (the compile time is reported apart), calls them from Python once per interval, and
times each call, so returns can be plotted against environment steps and against wall-clock
seconds. A ``callback(history)`` after each
evaluation can draw live plots or stop the run by returning ``False``.
"""

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class History(NamedTuple):
    env_steps: np.ndarray
    """``(E,)`` environment steps per seed at each evaluation (the first is 0)."""
    returns: np.ndarray
    """``(S, E)`` mean evaluation return of each seed at each evaluation."""
    seconds: np.ndarray
    """``(E,)`` wall-clock seconds of training (all seeds together) before each evaluation,
    compilation excluded."""
    compile_seconds: float
    metrics: dict[str, np.ndarray]
    """Interval means of the training diagnostics, each ``(S, E - 1, ...)``."""

    @property
    def mean_returns(self) -> np.ndarray:
        return self.returns.mean(axis=0)


def run_seeds(init: Callable[[jax.Array], Any], interval: Callable, evaluate: Callable,
              keys: jax.Array, *, num_intervals: int, steps_per_interval: int,
              callback: Callable[[History], bool | None] | None = None
              ) -> tuple[Any, History]:
    """Train ``len(keys)`` seeds together for ``num_intervals`` intervals.

    Returns the final (batched) run state and the ``History``. When ``callback`` returns
    ``False`` the run stops after that evaluation and the history holds what ran.
    """
    init_v = eqx.filter_jit(eqx.filter_vmap(init))
    interval_v = eqx.filter_jit(eqx.filter_vmap(interval, in_axes=(0, None)))
    evaluate_v = eqx.filter_jit(eqx.filter_vmap(evaluate))

    start = time.perf_counter()
    run = init_v(keys)
    interval_c = interval_v.lower(run, jnp.zeros((), jnp.int32)).compile()
    evaluate_c = evaluate_v.lower(run).compile()
    compile_seconds = time.perf_counter() - start

    run, first = evaluate_c(run)
    returns, seconds, metrics = [np.asarray(first)], [0.0], []
    elapsed = 0.0
    history = _history(steps_per_interval, returns, seconds, compile_seconds, metrics)
    for i in range(num_intervals):
        tick = time.perf_counter()
        run, step_metrics = interval_c(run, jnp.asarray(i * steps_per_interval, jnp.int32))
        jax.block_until_ready(run)
        elapsed += time.perf_counter() - tick
        run, mean_return = evaluate_c(run)
        returns.append(np.asarray(mean_return))
        seconds.append(elapsed)
        metrics.append(jax.tree.map(np.asarray, step_metrics))
        history = _history(steps_per_interval, returns, seconds, compile_seconds, metrics)
        if callback is not None and callback(history) is False:
            break
    return run, history


def _history(steps_per_interval, returns, seconds, compile_seconds, metrics) -> History:
    stacked = {name: np.stack([m[name] for m in metrics], axis=1) for name in
               (metrics[0] if metrics else {})}
    return History(np.arange(len(returns)) * steps_per_interval, np.stack(returns, axis=1),
                   np.asarray(seconds), compile_seconds, stacked)
