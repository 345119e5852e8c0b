"""Time per epoch of ProxProp (exact, cg3, cg10) relative to BackProp, and how far the CG
solvers are from the exact proximal step, in one run.

    .venv/bin/python benchmarks/proxprop.py [--sizes digits paper] [--epochs 5]
    .venv/bin/python benchmarks/proxprop.py --sizes errors [--iterations 1 3 5 10]

Every solver trains the same network from the same seed through the same code path
(BackProp is solver 'gradient'); each epoch time is the fastest of 3 compiled runs.
Prints seconds per epoch, the ratio to BackProp, and the training loss after the epochs.
Set-ups:
- digits: the notebook's default, 64-400-100-400-10 on digits (1438 examples), batch 100,
  Nesterov 0.95, BackProp lr 0.05, ProxProp lr 1 and tau 0.05;
- paper: the paper's CIFAR-10 MLP widths 3072-4000-1000-4000-10, batch 500, same step
  sizes, on 2000 random CIFAR-shaped examples (time only: the loss means little);
- errors: the proximal problems of one ProxProp step of the fashion_mlp preset, i.e. the
  real layer shapes (batch 500, 784-4000-1000-4000-10, tau 0.05) on the first 500
  Fashion-MNIST training images, at the initial weights (seed 0): for each hidden layer and
  K, the relative error |D_K - D*| / |D*| (Frobenius, over weight and bias) of ``cgK`` (one
  CG over the whole layer) and ``colcgK`` (the reference code's column-wise CG, at most K
  iterations) against the exact step D* solved in float64 with numpy; and of ``colcgK``
  without the reference code's eps = 1e-6 in its step sizes (same stopping rule): at these
  scales a column's squared residual is about 1e-6, so eps damps the reference's steps.
"""

import argparse
import platform
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

from lab.data import load
from lab.models import mlp
from lab.optim.proxprop import REFERENCE_TOL, ProxProp, _dense_cg, layer_problems, proximal_step
from lab.train import cross_entropy
from lab.train.proxprop import ProxPropConfig, as_inputs, make_train, seconds_per_epoch

SOLVERS = ("gradient", "exact", "cg3", "colcg3", "cg10")


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


def exact_float64(a, g, tau: float) -> np.ndarray:
    """D* = A^T (A A^T + I/tau)^-1 G with A = [a, 1], in float64: (in + 1, out)."""
    A = np.hstack([np.asarray(a, np.float64), np.ones((len(a), 1))])
    G = np.asarray(g, np.float64)
    return A.T @ np.linalg.solve(A @ A.T + np.eye(len(A)) / tau, G)


def solver_errors(iterations: list[int], tau: float = 0.05, batch: int = 500):
    """Relative errors of cgK and colcgK against the exact step, for each hidden layer."""
    x, y = load("fashion_mnist", "train")
    x, y = as_inputs(x[:batch], "mlp"), y[:batch]
    model = mlp([784, 4000, 1000, 4000, 10], key=jax.random.key(0))
    print(f"\nerrors: relative error |D_K - D*| / |D*| of the proximal step, fashion_mlp's "
          f"layers at initialisation, batch {batch}, tau {tau:g}")
    print(f"{'layer':>14} {'K':>3} {'cgK':>10} {'colcgK':>10} {'eps 0':>10}")
    for i, a, g, gradient in layer_problems(model, x, y, cross_entropy):
        layer = model.layers[i]
        exact = exact_float64(a, g, tau)
        A = jnp.concatenate([a, jnp.ones((len(a), 1), a.dtype)], 1)
        for k in iterations:
            steps = [proximal_step(layer, a, g, gradient, ProxProp(tau, solver))
                     for solver in (f"cg{k}", f"colcg{k}")]
            solved = [np.vstack([np.asarray(s.weight).T, np.asarray(s.bias)[None]])
                      for s in steps]
            solved.append(np.asarray(_dense_cg(A, g, tau, k, columnwise=True,
                                               tol=REFERENCE_TOL, eps=0.0)))
            errors = " ".join(f"{np.linalg.norm(D - exact) / np.linalg.norm(exact):10.3e}"
                              for D in solved)
            print(f"{layer.in_features:>6}->{layer.out_features:<6} {k:3d} {errors}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["digits", "paper", "errors"],
                        choices=["digits", "paper", "errors"])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--iterations", type=int, nargs="+", default=[1, 3, 5, 10])
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
    if "errors" in args.sizes:
        solver_errors(args.iterations)


if __name__ == "__main__":
    main()
