"""Speed of MPO and of search-based policy improvement on a gymnax task, in one run:

    .venv/bin/python benchmarks/policy_improvement.py [--quick] [--seeds 1 5] [--steps 200]

1. The ceiling: the environment alone. ``ControlTask(--env).step`` vmapped over ``--copies``
   copies inside one jitted ``lax.scan`` of ``--env-steps`` steps, with actions drawn
   uniformly in ``[-1, 1]`` inside the scan. Measured twice: with a reset of every copy whose
   episode ended (``where(end, reset, state)``, as the training loop does) and without resets.
   Steps per second = copies x steps / seconds.
2. Full training, end to end in jit: ``lab.train.mpo.make_run``'s ``interval`` (acting,
   environment step, replay, updates: one ``lax.scan`` of ``--steps`` environment steps),
   vmapped over ``--seeds`` seeds as ``lab.train.rl_loop.run_seeds`` does, for
   - MPO (depth 0, no model, ``N = --samples`` actions per state),
   - search at depth 1 and at depth 2 with the true model, in learning: ``N`` actions at the
     root and ``M = --branching`` at every node below it, so ``N M^(d-1)`` model steps and
     ``N M^d`` critic evaluations per replayed state.
   ``learning_starts`` is the batch size, and the timed intervals start after a first
   (untimed) interval from step 0, so every timed environment step runs
   ``updates_per_step`` (1) updates of a ``--batch`` batch. The interval is compiled first
   (the column "compile s"; for the environment rows, the first call with its compile),
   then the best and the median of ``--repeats`` intervals.
   Env steps/s per seed = steps / seconds; over all seeds, times the seed count; updates/s
   likewise. ``x env`` is the all-seed rate over the environment's rate with resets.

``--quick`` is a smoke run of the same code paths at tiny sizes (the test uses it).
"""

import argparse
import datetime
import os
import platform
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab.envs.control import ControlTask
from lab.runs.benchmarking import cpu_model, timed
from lab.train import mpo

# name: MPOConfig fields besides the sizes
VARIANTS = {
    "MPO": {"depth": 0, "model": "none"},
    "search d1": {"depth": 1, "model": "true", "search_in": "learning"},
    "search d2": {"depth": 2, "model": "true", "search_in": "learning"},
}


def make_env_scan(task: ControlTask, copies: int, steps: int, *, resets: bool):
    """A jitted ``(states, key) -> (states, summed reward)``: ``steps`` vmapped steps of
    ``copies`` copies, with random actions; ``resets`` resets copies whose episode ended."""

    def one(states, key):
        k_act, k_step, k_reset = jax.random.split(key, 3)
        actions = jax.random.uniform(k_act, (copies, task.action_dim), minval=-1.0, maxval=1.0)
        states, _, reward, terminated, truncated = jax.vmap(task.step)(
            states, actions, jax.random.split(k_step, copies))
        if resets:
            fresh, _ = jax.vmap(task.reset)(jax.random.split(k_reset, copies))
            end = terminated | truncated
            states = jax.tree.map(
                lambda r, s: jnp.where(end.reshape(end.shape + (1,) * (s.ndim - 1)), r, s),
                fresh, states)
        return states, jnp.sum(reward)

    @jax.jit
    def run(states, key):
        states, rewards = jax.lax.scan(one, states, jax.random.split(key, steps))
        return states, jnp.sum(rewards)

    return run


def env_rate(task: ControlTask, copies: int, steps: int, repeats: int, *, resets: bool
             ) -> tuple[float, float, float]:
    """(first call s, best s, environment steps per second at the best call)."""
    k_reset, k_run = jax.random.split(jax.random.key(0))
    states, _ = jax.vmap(task.reset)(jax.random.split(k_reset, copies))
    run = make_env_scan(task, copies, steps, resets=resets)
    first, best, _ = timed(lambda: run(states, k_run), repeats, warmup=1)
    return first, best, copies * steps / best


def variant_config(name: str, *, widths, batch: int, samples: int, branching: int,
                   steps: int, repeats: int) -> mpo.MPOConfig:
    """The training configuration of ``name``: learning from step ``batch`` on, one interval
    of ``steps`` to warm up and ``repeats`` timed ones, a replay that never wraps."""
    intervals = 2 + repeats  # warm-up, repeats timed, and one spare
    return mpo.MPOConfig(widths=tuple(widths), num_samples=samples, branching=branching,
                         batch_size=batch,
                         learning_starts=batch, eval_every=steps,
                         total_steps=intervals * steps, replay_capacity=intervals * steps,
                         **VARIANTS[name])


def training_rate(config: mpo.MPOConfig, task: ControlTask, seeds: int, repeats: int
                  ) -> tuple[float, float, float]:
    """(compile s, best s, median s) of one interval of ``config.eval_every`` environment
    steps with updates, all ``seeds`` together (vmapped, as ``run_seeds`` does)."""
    init, interval, _ = mpo.make_run(config, task)
    init_v = eqx.filter_jit(eqx.filter_vmap(init))
    interval_v = eqx.filter_jit(eqx.filter_vmap(interval, in_axes=(0, None)))
    run = jax.block_until_ready(init_v(jax.random.split(jax.random.key(0), seeds)))
    start = time.perf_counter()
    interval_c = interval_v.lower(run, jnp.zeros((), jnp.int32)).compile()
    compile_seconds = time.perf_counter() - start

    steps = config.eval_every
    # untimed: fills the replay to learning_starts, then learns (first allocations, threads)
    run, _ = jax.block_until_ready(interval_c(run, jnp.asarray(0, jnp.int32)))
    times = []
    for i in range(1, repeats + 1):
        first_step = i * steps
        assert first_step >= config.learning_starts  # every timed step updates
        start = time.perf_counter()
        run, _ = jax.block_until_ready(interval_c(run, jnp.asarray(first_step, jnp.int32)))
        times.append(time.perf_counter() - start)
    return compile_seconds, min(times), float(np.median(times))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--env", default="Pendulum-v1", help="a gymnax continuous-control id")
    parser.add_argument("--copies", type=int, default=1024,
                        help="environment copies vmapped for the ceiling")
    parser.add_argument("--env-steps", type=int, default=1000,
                        help="steps per jitted scan for the ceiling")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 5],
                        help="seed counts trained together (vmapped); the notebook runs 5")
    parser.add_argument("--steps", type=int, default=200,
                        help="environment steps per seed in one timed interval")
    parser.add_argument("--repeats", type=int, default=2, help="timed intervals")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=20,
                        help="N: actions per state of MPO and at a search's root")
    parser.add_argument("--branching", type=int, default=4,
                        help="M: actions at every search node below the root")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.copies, args.env_steps, args.seeds, args.steps, args.repeats = 16, 20, [2], 12, 1
        args.widths, args.batch, args.samples, args.branching = [8], 4, 3, 2

    task = ControlTask(args.env)
    print(f"# policy-improvement speed, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.node()}, {cpu_model()} ({os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}), jax {jax.__version__}, devices {jax.devices()}")
    print(f"{args.env}; training: widths {tuple(args.widths)}, batch {args.batch}, "
          f"learning_starts {args.batch}, 1 update per env step, {args.steps} env steps per "
          f"seed per timed interval, best of {args.repeats}", flush=True)

    rows, ceiling = [], None
    for resets in (True, False):
        first, best, rate = env_rate(task, args.copies, args.env_steps, args.repeats,
                                     resets=resets)
        ceiling = ceiling or rate
        rows.append((f"env alone, {'with' if resets else 'no'} resets", "-",
                     f"{args.copies} copies x {args.env_steps}", f"{first:.1f}",
                     f"{best:.4g}", "-", "-", f"{rate:.4g}", "-", f"{rate / ceiling:.3g}"))
    for name in args.variants:
        config = variant_config(name, widths=args.widths, batch=args.batch,
                                samples=args.samples, branching=args.branching,
                                steps=args.steps, repeats=args.repeats)
        branching = f"{config.num_samples}" + (f", {config.branching}" if config.depth else "")
        for seeds in args.seeds:
            compiled, best, median = training_rate(config, task, seeds, args.repeats)
            per_seed = args.steps / best
            rows.append((name, f"{branching}", f"{seeds} seeds x {args.steps}",
                         f"{compiled:.1f}", f"{best:.4g}", f"{median:.4g}", f"{per_seed:.4g}",
                         f"{seeds * per_seed:.4g}",
                         f"{seeds * per_seed * config.updates_per_step:.4g}",
                         f"{seeds * per_seed / ceiling:.3g}"))
            print(" | ".join(rows[-1]), flush=True)

    print("\n| what | N, M | steps per call | compile s | best s | median s "
          "| env steps/s per seed | env steps/s, all seeds | updates/s, all seeds | x env |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")

if __name__ == "__main__":
    main()
