"""VS-ML minus tuned online SGD/Adam on held-out tasks, against meta-training compute.

    .venv/bin/python benchmarks/vsml_compute.py --dataset digits --method gradient \\
        --budgets 375 1500 6000 --seeds 3 --out /tmp/vsml_compute

One dataset and method per call (see ``lab.experiments.vsml_compute``): meta-trains the
seeds to every budget along one checkpointed run (``--checkpoints``, default
``OUT/checkpoints``; a rerun with the same or larger budgets resumes, ``--no-resume`` starts
over), measures the gap at each, writes ``OUT/<dataset>-<method>.json`` after every budget
and prints the table. Every call then redraws ``OUT/gap_vs_compute.png`` from all the JSON
files in ``OUT``: the gap (mean and each seed) against meta-training FLOPs and seconds, log
x. ``--plot-only`` just prints the tables and redraws. ``--quick`` is a smoke run.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
from pathlib import Path

import jax

from lab.experiments import vsml_compute

DEFAULT_LR = {"gradient": 3e-3, "es": 0.025}


def table(result: dict) -> str:
    study = result["study"]
    lines = [f"{study['dataset']}, {study['method']}"
             f"{', population ' + str(study['population']) if study['method'] == 'es' else ''}"
             f", {study['seeds']} seeds, {result['device']} ({result['backend']}); "
             f"{result['flops_per_iteration']:.4g} FLOPs per meta-iteration and seed; tuned "
             f"baselines on held-out tasks: " + ", ".join(
                 f"{k} {v:.3f} (lr {result['tuned_lrs'][k]})"
                 for k, v in result["baselines"].items()),
             "| budget | FLOPs per seed | seconds (all seeds) | meta-loss | VS-ML acc per seed "
             "| best baseline | gap mean ± std | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for row in result["budgets"]:
        lines.append(
            f"| {row['budget']} | {row['flops']:.3g} | {row['seconds']:.1f} | "
            f"{', '.join(f'{v:.3f}' for v in row['meta_loss_last50'])} | "
            f"{', '.join(f'{v:.3f}' for v in row['vsml_accuracy'])} | "
            f"{row['best_baseline']} {row['best_baseline_accuracy']:.3f} | "
            f"{row['gap_mean']:+.3f} ± {row['gap_std']:.3f} | {row['verdict']} |")
    return "\n".join(lines)


def plot(out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    results = [r for r in results if r.get("budgets")]
    if not results:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for result in results:
        study, rows = result["study"], result["budgets"]
        label = f"{study['dataset']} {study['method']} ({result['backend']})"
        for ax, x in zip(axes, ("flops", "seconds"), strict=True):
            xs = [r[x] for r in rows]
            line, = ax.plot(xs, [r["gap_mean"] for r in rows], "o-", label=label)
            for r in rows:
                ax.scatter([r[x]] * len(r["gap"]), r["gap"], s=10, color=line.get_color(),
                           alpha=0.5)
    for ax, name in zip(axes, ("meta-training FLOPs per seed (XLA cost analysis)",
                               "meta-training wall seconds (all seeds together)"), strict=True):
        ax.set_xscale("log")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("VS-ML minus best tuned SGD/Adam\n(online accuracy, held-out tasks)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = out / "gap_vs_compute.png"
    fig.savefig(path, dpi=120)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="digits", choices=vsml_compute.DATASETS)
    parser.add_argument("--method", default="gradient", choices=("gradient", "es"))
    parser.add_argument("--budgets", type=int, nargs="+", default=[375, 1500, 6000],
                        help="meta-iterations at which VS-ML is meta-tested, increasing")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--population", type=int, default=256, help="ES population")
    parser.add_argument("--lr", type=float, default=None,
                        help="Adam step size on theta (default: 3e-3 gradient, 0.025 es)")
    parser.add_argument("--test-episodes", type=int, default=256)
    parser.add_argument("--every", type=int, default=0,
                        help="iterations per checkpointed chunk (0: the budgets' gcd)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/vsml_compute"))
    parser.add_argument("--checkpoints", type=Path, default=None,
                        help="where runs resume from (default OUT/checkpoints)")
    parser.add_argument("--no-resume", action="store_true",
                        help="delete this study's checkpoints first")
    parser.add_argument("--plot-only", action="store_true",
                        help="print the tables and redraw the plot from OUT's JSON files")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: budgets 2 4 8, 2 seeds, population 4, 8 episodes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        if args.quick:
            args.budgets, args.seeds, args.population = [2, 4, 8], 2, 4
            args.test_episodes = 8
        study = vsml_compute.Study(
            dataset=args.dataset, method=args.method, budgets=tuple(args.budgets),
            seeds=args.seeds, lr=args.lr or DEFAULT_LR[args.method], population=args.population,
            test_episodes=args.test_episodes, every=args.every)
        root = args.checkpoints or args.out / "checkpoints"
        if args.no_resume:
            shutil.rmtree(vsml_compute.run_dir(study, root), ignore_errors=True)
        print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.node()} "
              f"({os.cpu_count()} cores), jax {jax.__version__}, backend "
              f"{jax.default_backend()} ({jax.devices()[0].device_kind})", flush=True)
        path = args.out / f"{args.dataset}-{args.method}.json"
        for result in vsml_compute.run(study, root, log=lambda m: print(m, flush=True)):
            result["written"] = datetime.datetime.now().isoformat(timespec="seconds")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(result, indent=1))
            tmp.replace(path)
    for path in sorted(args.out.glob("*.json")):
        print("\n" + table(json.loads(path.read_text())))
    png = plot(args.out)
    print(f"\nplot: {png}")


if __name__ == "__main__":
    main()
