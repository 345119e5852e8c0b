"""Time per epoch of ProxProp (exact, cg3, cg10) relative to BackProp, in one run.

    .venv/bin/python benchmarks/proxprop.py [--sizes digits paper] [--epochs 5]

Every solver trains the same network from the same seed through the same code path
(BackProp is solver 'gradient'); each epoch time is the fastest of 3 compiled runs.
Prints seconds per epoch, the ratio to BackProp, and the training loss after the epochs.
Set-ups:
- digits: the notebook's default, 64-400-100-400-10 on digits (1438 examples), batch 100,
  Nesterov 0.95, BackProp lr 0.05, ProxProp lr 1 and tau 0.05;
- paper: the paper's CIFAR-10 MLP widths 3072-4000-1000-4000-10, batch 500, same step
  sizes, on 2000 random CIFAR-shaped examples (time only: the loss means little).
"""

import argparse
import platform
from dataclasses import replace

import jax
import numpy as np

from lab.data import load
from lab.train.proxprop import ProxPropConfig, as_inputs, make_train, seconds_per_epoch

SOLVERS = ("gradient", "exact", "cg3", "cg10")


def setups(epochs: int):
    x, y = load("digits", "train")
    x_val, y_val = load("digits", "test")
    digits = (as_inputs(x, "mlp"), y, as_inputs(x_val, "mlp"), y_val)
    rng = np.random.default_rng(0)
    x_big = rng.standard_normal((2000, 3072)).astype(np.float32)
    y_big = rng.integers(0, 10, 2000).astype(np.int32)
    paper = (x_big, y_big, x_big[:500], y_big[:500])
    return {
        "digits": (ProxPropConfig(epochs=epochs), digits),
        "paper": (ProxPropConfig(hidden=(4000, 1000, 4000), batch_size=500, epochs=epochs),
                  paper),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["digits", "paper"],
                        choices=["digits", "paper"])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.machine()}, {jax.devices()[0].device_kind}, "
          f"jax {jax.__version__}, {args.epochs} epochs")
    for name, (config, data) in setups(args.epochs).items():
        if name not in args.sizes:
            continue
        print(f"\n{name}: MLP {config.hidden}, batch {config.batch_size}, "
              f"{len(data[0])} examples")
        print(f"{'solver':>9} {'s/epoch':>9} {'x BackProp':>11} {'train loss':>11}")
        base = None
        for solver in SOLVERS:
            cfg = replace(config, solver=solver)
            lr = 0.05 if solver == "gradient" else 1.0
            seconds = seconds_per_epoch(cfg, data, lr)
            loss = float(jax.jit(make_train(cfg, *data))(jax.random.key(0), lr).train_loss[-1])
            base = base or seconds
            print(f"{solver:>9} {seconds:9.4f} {seconds / base:11.2f} {loss:11.4g}")


if __name__ == "__main__":
    main()
