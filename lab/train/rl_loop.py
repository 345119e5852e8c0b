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

With a ``mesh`` (``lab.parallel.mesh``) the seeds are split over its ``"data"`` axis: the
keys are placed with ``parallel.shard_batch`` and the run state is kept there by sharding
constraints inside the jitted ``init``, ``interval`` and ``evaluate``, so each device inits
and steps its own seeds' environments, replay and updates, with no cross-device traffic.
An agent can pass its own ``constrain(run, mesh)`` (V-MPO also splits each seed's
environments over ``"model"``). Without a mesh nothing changes.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from lab import parallel
from lab.train import checkpoint


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
              callback: Callable[[History], bool | None] | None = None,
              mesh: Mesh | None = None,
              constrain: Callable[[Any, Mesh | None], Any] = parallel.constrain_batch,
              progress: Path | None = None) -> tuple[Any, History]:
    """Train ``len(keys)`` seeds together for ``num_intervals`` intervals.

    Returns the final (batched) run state and the ``History``. When ``callback`` returns
    ``False`` the run stops after that evaluation and the history holds what ran. With a
    ``mesh`` the seeds must divide over its ``"data"`` axis; ``constrain(run, mesh)`` lays out
    the batched run state inside jit (default: every leaf's seed axis over ``"data"``,
    ``parallel.constrain_batch``); the metrics and returns are split over ``"data"``.

    With ``progress`` (a file) the run state and the history so far are saved there after
    every evaluation and, when the file is there, the run continues from it: the same
    compiled programs from the same state, so the same numbers as an uninterrupted run (its
    compile seconds those of the first call; the file is left for the caller to remove).
    """
    vmapped_init = eqx.filter_vmap(init)
    vmapped_interval = eqx.filter_vmap(interval, in_axes=(0, None))
    vmapped_evaluate = eqx.filter_vmap(evaluate)

    def placed(fn):
        """``fn(run, ...) -> (run, per_seed)`` with ``run`` laid out by ``constrain`` and
        ``per_seed`` (metrics, returns) split over ``"data"`` like the seeds."""
        def call(run, *args):
            run, per_seed = fn(constrain(run, mesh), *args)
            return constrain(run, mesh), parallel.constrain_batch(per_seed, mesh)
        return eqx.filter_jit(call)

    init_v = eqx.filter_jit(lambda keys: constrain(vmapped_init(keys), mesh))
    interval_v, evaluate_v = placed(vmapped_interval), placed(vmapped_evaluate)

    start = time.perf_counter()
    run = init_v(keys if mesh is None else parallel.shard_batch(keys, mesh))
    interval_c = interval_v.lower(run, jnp.zeros((), jnp.int32)).compile()
    evaluate_c = evaluate_v.lower(run).compile()
    compile_seconds = time.perf_counter() - start

    saved = None if progress is None else checkpoint.resume(progress, run)
    if saved is None:
        run, first = evaluate_c(run)
        returns, seconds, metrics = [np.asarray(first)], [0.0], []
    else:  # placed as a fresh run is, so that the compiled programs take it
        run = jax.tree.map(lambda x, ref: jax.device_put(x, ref.sharding)
                           if eqx.is_array(ref) else x, saved[0], run)
        info = saved[1]
        returns, metrics = checkpoint.from_json([info["returns"], info["metrics"]])
        seconds, compile_seconds = info["seconds"], info["compile_seconds"]
    elapsed = seconds[-1]
    history = _history(steps_per_interval, returns, seconds, compile_seconds, metrics)
    for i in range(len(returns) - 1, num_intervals):
        tick = time.perf_counter()
        run, step_metrics = interval_c(run, jnp.asarray(i * steps_per_interval, jnp.int32))
        jax.block_until_ready(run)
        elapsed += time.perf_counter() - tick
        run, mean_return = evaluate_c(run)
        returns.append(np.asarray(mean_return))
        seconds.append(elapsed)
        metrics.append(jax.tree.map(np.asarray, step_metrics))
        history = _history(steps_per_interval, returns, seconds, compile_seconds, metrics)
        if progress is not None:
            checkpoint.save(progress, run, returns=checkpoint.to_json(returns),
                            metrics=checkpoint.to_json(metrics), seconds=seconds,
                            compile_seconds=compile_seconds)
        if callback is not None and callback(history) is False:
            break
    return run, history


def _history(steps_per_interval, returns, seconds, compile_seconds, metrics) -> History:
    stacked = {name: np.stack([m[name] for m in metrics], axis=1) for name in
               (metrics[0] if metrics else {})}
    return History(np.arange(len(returns)) * steps_per_interval, np.stack(returns, axis=1),
                   np.asarray(seconds), compile_seconds, stacked)
