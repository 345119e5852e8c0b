"""Causal model selection's costs side by side: training the candidates together or one by
one, and scoring them with the graph fixed or searched.

    .venv/bin/python benchmarks/causal_selection.py [--candidates 100] [--nodes 4 6 8 10]
                                                    [--steps 300] [--quick]

1. Training: ``--candidates`` MLPs that differ only in their seed, with early stopping
   measured every tenth of the steps, trained together (``vmap``
   inside one jit, ``lab.train.causal_selection.train``) against a Python loop over the same
   models, each trained by the same compiled single-model program (compiled once, not timed).
   The ratio is the loop's time over the vmapped one's.
2. Scoring, per graph size: the seconds per candidate of the fixed-graph BIC (the target's
   terms) and of the search with the graph's edges required, and their ratio.
"""

import argparse
import datetime
import functools
import os
import platform
import time


def best_of(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 6, 8, 10])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rows", type=int, default=500, help="selection rows scored")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="few candidates and steps")
    args = parser.parse_args()
    if min(args.candidates, args.steps, args.rows, args.repeats) < 1 or min(args.nodes) < 2:
        parser.error("--candidates, --steps, --rows and --repeats must be at least 1, and "
                     "--nodes at least 2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import equinox as eqx
    import jax
    import numpy as np

    from lab.causal import SCM, random_dag
    from lab.causal.select import causal_scores
    from lab.train import causal_selection as train

    count = 8 if args.quick else args.candidates
    steps = 20 if args.quick else args.steps
    print(f"causal model selection: {count} candidates, {steps} steps; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{datetime.date.today()}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 5)).astype(np.float32)
    y = (np.tanh(x) @ rng.standard_normal(5) + 0.3 * rng.standard_normal(1000)).astype(np.float32)
    models = train.candidates(jax.random.key(0), count, 5, 32)
    keys = jax.random.split(jax.random.key(1), count)
    schedule = train.Schedule(steps, 64, 3e-3, every=max(1, steps // 10))
    stop = (x[:200], y[:200])
    together = lambda: jax.block_until_ready(train.train(models, keys, x, y, *stop, schedule))  # noqa: E731
    one = eqx.filter_jit(train.train_one)
    pick = lambda i: jax.tree.map(lambda a: a[i] if eqx.is_array(a) else a, models)  # noqa: E731
    singles = [pick(i) for i in range(count)]
    loop = lambda: [jax.block_until_ready(one(m, k, x, y, *stop, schedule))  # noqa: E731
                    for m, k in zip(singles, keys, strict=True)]
    together()
    loop()  # compiled once for every model: same shapes
    t_together, t_loop = best_of(together, args.repeats), best_of(loop, args.repeats)
    print(f"training: vmapped {t_together:.2f} s, loop {t_loop:.2f} s, "
          f"loop / vmapped {t_loop / t_together:.1f}x")

    print(f"{'nodes':>5} {'fixed s/cand.':>14} {'search s/cand.':>15} {'search / fixed':>15}")
    for nodes in args.nodes:
        graph = random_dag(rng, nodes, 0.5)
        scm = SCM.random(rng, graph)
        data = scm.sample(rng, args.rows)
        sinks = [j for j in range(nodes) if len(graph.children(j)) == 0]
        target = graph.names[sinks[0]]
        j = graph.index(target)
        predictions = data[:, j] + rng.standard_normal((count if args.quick else 20, args.rows))
        per = {mode: best_of(functools.partial(causal_scores, data, graph, target, predictions,
                                               mode), args.repeats) / len(predictions)
               for mode in ("fixed", "search")}
        print(f"{nodes:5d} {per['fixed']:14.2e} {per['search']:15.2e} "
              f"{per['search'] / per['fixed']:14.0f}x")


if __name__ == "__main__":
    main()
