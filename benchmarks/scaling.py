"""Steps per second of the data-parallel MLP step against the number of devices.

    .venv/bin/python benchmarks/scaling.py [--devices 1 2 4 8] [--batch 512] [--steps 20]

Each device count runs in its own python with
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (CPU) and trains an MLP
(64-256-256-10, Adam, cross-entropy) on a fixed global batch with
``lab.parallel.data_parallel``: the batch is split over the devices, the parameters are
replicated. Prints steps/s (fastest of 3 timed runs of ``--steps`` steps after one
compiled warm-up step) and the ratio to the first device count.

On simulated CPU devices every "device" shares the same cores (2 on the workbench
machine), so more devices cannot be faster there: this is a functional check that the
sharded step runs at every device count and of its overhead. Real speed-ups need real
devices (several GPUs, or several hosts after ``lab.parallel.initialize_distributed``).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

WIDTHS = [64, 256, 256, 10]


def measure(batch: int, steps: int) -> float:
    """Steps per second on all visible devices (run inside the worker process)."""
    import equinox as eqx
    import jax
    import numpy as np
    import optax

    from lab import parallel
    from lab.models.feedforward import mlp
    from lab.train.supervised import batch_loss

    optimizer = optax.adam(1e-3)

    def step(model, opt_state, batch):
        grads, metrics = eqx.filter_grad(batch_loss, has_aux=True)(model, *batch)
        updates, opt_state = optimizer.update(grads, opt_state)
        return eqx.apply_updates(model, updates), opt_state, metrics

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, WIDTHS[0])).astype(np.float32)
    y = rng.integers(0, WIDTHS[-1], batch).astype(np.int32)
    mesh = parallel.mesh()
    model = parallel.shard_params(mlp(WIDTHS, key=jax.random.key(0)), mesh)
    opt_state = parallel.shard_params(optimizer.init(eqx.filter(model, eqx.is_array)), mesh)
    train_step, data = parallel.data_parallel(step, mesh), parallel.shard_batch((x, y), mesh)
    model, opt_state, metrics = train_step(model, opt_state, data)
    jax.block_until_ready(metrics)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            model, opt_state, metrics = train_step(model, opt_state, data)
        jax.block_until_ready(metrics)
        best = min(best, time.perf_counter() - start)
    return steps / best


def run_worker(devices: int, batch: int, steps: int) -> float:
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    out = subprocess.run([sys.executable, __file__, "--worker", "--batch", str(batch),
                          "--steps", str(steps)], env=env, stdout=subprocess.PIPE, text=True,
                         check=True)
    return json.loads(out.stdout.splitlines()[-1])["steps_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch", type=int, default=512, help="global batch size")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps({"steps_per_s": measure(args.batch, args.steps)}))
        return
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, simulated CPU "
          f"devices; MLP {'-'.join(map(str, WIDTHS))}, global batch {args.batch}")
    print(f"{'devices':>8} {'rows/device':>12} {'steps/s':>9} {'x first':>8}")
    base = None
    for devices in args.devices:
        rate = run_worker(devices, args.batch, args.steps)
        base = base or rate
        print(f"{devices:>8} {args.batch // devices:>12} {rate:>9.1f} {rate / base:>8.2f}",
              flush=True)


if __name__ == "__main__":
    main()
