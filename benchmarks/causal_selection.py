"""Causal model selection's costs side by side: training the candidates together or one by
one, and scoring them with the graph fixed or searched; or (``--search``) the structure
searches side by side.

    .venv/bin/python benchmarks/causal_selection.py [--candidates 100] [--nodes 4 6 8 10]
                                                    [--steps 300] [--quick]
    .venv/bin/python benchmarks/causal_selection.py --search [--nodes 6 10] [--seeds 5]
                                                    [--rows 2000]

1. Training: ``--candidates`` MLPs that differ only in their seed, with early stopping
   measured every tenth of the steps, trained together (``vmap``
   inside one jit, ``lab.train.causal_selection.train``) against a Python loop over the same
   models, each trained by the same compiled single-model program (compiled once, not timed).
   The ratio is the loop's time over the vmapped one's.
2. Scoring, per graph size: the seconds per candidate of the fixed-graph BIC (the target's
   terms) and of the search with the graph's edges required, and their ratio.

``--search``: per graph size and seed, a random DAG (``random_dag``, edge probability 0.5), a
linear-Gaussian SCM on it (``SCM.random``) and ``--rows`` rows; then the greedy DAG search
(``lab.causal.search``), GES over equivalence classes (``lab.causal.ges``) and causal-learn's
GES (``local_score_BIC``). Every BIC is ours (``node_bic``, lower is better) on a DAG of the
search's class, so the three are on one score; beside them the true graph's BIC, the
structural Hamming distances to the true graph's CPDAG (skeleton: pairs whose adjacency
differs; CPDAG: pairs whose edge differs in presence or marks) and each search's seconds.
causal-learn is a benchmark-only dependency (the ``dev`` extra).
"""

import argparse
import datetime
import functools
import os
import platform
import sys
import time


def best_of(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def shd(a, b) -> tuple[int, int]:
    """Structural Hamming distances between two patterns (``lab.causal.pdag``'s convention):
    the node pairs whose adjacency differs (skeleton), and those whose edge differs in
    presence or marks (CPDAG)."""
    import numpy as np

    upper = np.triu(np.ones(a.shape, bool), 1)
    skeleton = ((a | a.T) != (b | b.T)) & upper
    marks = ((a != b) | (a.T != b.T)) & upper
    return int(skeleton.sum()), int(marks.sum())


def compare_searches(args) -> None:
    """``--search``: the greedy DAG search, GES and causal-learn's GES per graph (see the
    module docstring)."""
    import warnings

    try:
        from causallearn.search.ScoreBased.GES import ges as causallearn_ges
    except ImportError:
        sys.exit("causal-learn is not installed (--search compares with its GES): run "
                 "`.venv/bin/pip install -e '.[dev]'` (or `make setup`)")
    import numpy as np

    from lab.causal import SCM, Graph, cpdag, ges, graph_bic, random_dag, search
    from lab.causal.pdag import extension

    def timed(run, *args):
        start = time.perf_counter()
        with warnings.catch_warnings():  # causal-learn's on its own internals
            warnings.simplefilter("ignore")
            out = run(*args)
        return out, time.perf_counter() - start

    print(f"structure search: linear-Gaussian SCMs, {args.rows} rows, {args.seeds} seeds; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{datetime.date.today()}")
    print("BIC: ours on a DAG of each search's class (lower is better); SHD against the true "
          "CPDAG, skeleton / CPDAG; seconds per search. g: greedy DAG search, G: lab's GES, "
          "cl: causal-learn's GES")
    print(f"{'nodes':>5} {'seed':>4} {'edges':>5} {'true':>9} {'greedy':>9} {'GES':>9} "
          f"{'cl':>9} {'GES-cl':>7} {'g-GES':>7} {'SHD g':>6} {'SHD G':>6} {'SHD cl':>6} "
          f"{'s g':>5} {'s G':>5} {'s cl':>5}")
    for nodes in args.nodes:
        rows = []
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            graph = random_dag(rng, nodes, 0.5)
            data = SCM.random(rng, graph).sample(rng, args.rows)
            truth = cpdag(graph.edges)
            greedy, t_greedy = timed(search, data, graph.names)
            ours, t_ours = timed(ges, data, graph.names)
            theirs, t_theirs = timed(causallearn_ges, data)
            # causal-learn: graph[j, i] = 1 and graph[i, j] = -1 is i -> j, both -1 is i - j
            their_class = theirs["G"].graph == -1
            their_bic = graph_bic(data, Graph(graph.names, extension(their_class)))[0]
            bics = (graph_bic(data, graph)[0], greedy.bic, ours.bic, their_bic)
            distances = [shd(g, truth) for g in (cpdag(greedy.graph.edges), ours.cpdag,
                                                   their_class)]
            rows.append((bics, distances, (t_greedy, t_ours, t_theirs)))
            print(f"{nodes:5d} {seed:4d} {int(graph.edges.sum()):5d} "
                  + " ".join(f"{b:9.1f}" for b in bics)
                  + f" {bics[2] - bics[3]:7.1f} {bics[1] - bics[2]:7.1f} "
                  + " ".join(f"{s}/{c}".rjust(6) for s, c in distances)
                  + " " + " ".join(f"{t:5.2f}" for t in (t_greedy, t_ours, t_theirs)))
        bics = np.array([r[0] for r in rows])
        distances = np.array([r[1] for r in rows])
        times = np.array([r[2] for r in rows])
        exact = (distances[:, :, 1] == 0).sum(0)
        print(f"{nodes:5d} mean: GES - cl {np.mean(bics[:, 2] - bics[:, 3]):+.1f} (worse on "
              f"{int(np.sum(bics[:, 2] - bics[:, 3] > 1e-6))} of {len(rows)}), greedy - GES "
              f"{np.mean(bics[:, 1] - bics[:, 2]):+.1f}; skeleton SHD g/G/cl "
              + "/".join(f"{v:.1f}" for v in distances[:, :, 0].mean(0))
              + "; true CPDAG g/G/cl " + "/".join(f"{int(v)}" for v in exact)
              + f" of {len(rows)}; s per search g/G/cl "
              + "/".join(f"{v:.2f}" for v in times.mean(0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", action="store_true",
                        help="compare the structure searches instead (see the docstring)")
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--nodes", type=int, nargs="+",
                        help="graph sizes (default 4 6 8 10; with --search 6 10)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rows", type=int,
                        help="selection rows scored (default 500; with --search 2000)")
    parser.add_argument("--seeds", type=int, default=5, help="--search: graphs per size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="few candidates and steps")
    args = parser.parse_args()
    args.nodes = args.nodes or ([6, 10] if args.search else [4, 6, 8, 10])
    args.rows = args.rows or (2000 if args.search else 500)
    if min(args.candidates, args.steps, args.rows, args.repeats, args.seeds) < 1 \
            or min(args.nodes) < 2:
        parser.error("--candidates, --steps, --rows, --seeds and --repeats must be at least 1, "
                     "and --nodes at least 2")
    if args.search:
        compare_searches(args)
        return
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
        # the paper's score (no floor), as the experiment's headline rules use it
        per = {mode: best_of(functools.partial(causal_scores, data, graph, target, predictions,
                                               mode, observed_floor=False), args.repeats)
               / len(predictions)
               for mode in ("fixed", "search")}
        print(f"{nodes:5d} {per['fixed']:14.2e} {per['search']:15.2e} "
              f"{per['search'] / per['fixed']:14.0f}x")


if __name__ == "__main__":
    main()
