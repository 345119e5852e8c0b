"""What notebook 08's pieces cost, side by side in one run: training configurations of the
jitted A2C one at a time against vmapped together (``lab.experiments.a2c.curves``), and
replaying sweeps from curves with each method (``lab.sweeps.simulator``).

    .venv/bin/python benchmarks/early_termination.py [--configs 8] [--steps 100000]
                                                     [--trials 128] [--orders 20]

The configurations share t_max (one compiled program when vmapped); each one-at-a-time call
compiles its own, as a sweep of single trials would. Prints environment steps per second both
ways and their ratio, then replays per second for each method on ``--trials`` synthetic
configurations (compute does not depend on the values).
"""

import argparse
import os
import platform
import time

import jax
import numpy as np

from lab.experiments import a2c
from lab.runs.benchmarking import cpu_model
from lab.sweeps.simulator import METHODS, Curves, replay
from lab.sweeps.spec import Dimension, SweepSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--orders", type=int, default=20)
    args = parser.parse_args()
    print(f"{cpu_model()}, {os.cpu_count()} cores, {platform.python_version()}, jax "
          f"{jax.__version__} on {jax.devices()[0].platform}")

    rng = np.random.default_rng(0)
    configs = [{"learning_rate": float(10 ** rng.uniform(-5, -2)), "t_max": 5,
                "discount": 0.99} for _ in range(args.configs)]
    common = dict(envs=16, steps=args.steps, evaluations=4, seeds=2)
    start = time.perf_counter()
    one_by_one = np.concatenate([a2c.curves([c], **common)[0] for c in configs])
    alone = time.perf_counter() - start
    start = time.perf_counter()
    vmapped = a2c.curves(configs, **common)[0]
    together = time.perf_counter() - start
    steps = args.configs * 2 * args.steps
    print(f"A2C curves, {args.configs} configurations x 2 seeds x {args.steps:,} steps "
          f"(compilation included): one at a time {steps / alone:,.0f} env steps/s, vmapped "
          f"together {steps / together:,.0f} env steps/s: {alone / together:.1f}x")
    # the ratio compares like with like only if both ways compute the same curves
    same = np.isnan(one_by_one) == np.isnan(vmapped)
    gap = float(np.nanmax(np.abs(one_by_one - vmapped), initial=0.0))
    print(f"same curves both ways: NaN where the other has NaN {bool(same.all())}, largest "
          f"difference {gap:.3g}")

    spec = SweepSpec(name="bench", notebook="x.ipynb", metric="m", phases=4, survival=0.5,
                     space=(Dimension("lr", "loguniform", 1e-5, 1e-2),))
    values = rng.normal(size=(args.trials, 1)) * np.arange(1, 5) + rng.normal(
        size=(args.trials, 4))
    curves = Curves(spec, tuple({"lr": 1e-3} for _ in values), values)
    for method in METHODS:
        start = time.perf_counter()
        for k in range(args.orders):
            replay(curves, method, np.random.default_rng(k).permutation(args.trials),
                   workers=2, rng=np.random.default_rng(k))
        rate = args.orders / (time.perf_counter() - start)
        print(f"replay {method:>13}: {rate:7.1f} sweeps of {args.trials} trials per second")


if __name__ == "__main__":
    main()
