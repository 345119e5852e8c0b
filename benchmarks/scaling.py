"""Throughput of the sharded training code against the number of devices, side by side.

    .venv/bin/python benchmarks/scaling.py [--workloads mlp proxprop sac_ae vsml_es mpo]
                                           [--devices 1 2 4 8] [--model 1] [--quick]

For each workload and each device count a fresh python runs the workload on a mesh of that
many devices (``lab.parallel.mesh(devices, model)``) with the same global sizes (strong
scaling) and prints its throughput; the table gives the ratio to the first device count.

- ``mlp``: ``lab.parallel.data_parallel`` on an MLP (64-256-256-10, Adam), global batch
  512: steps/s.
- ``proxprop``: one epoch of ProxProp (exact solver) on a scaled-down paper MLP
  (1024-1024-256-1024-10, batch 512, 4,096 rows; ``lab.train.proxprop``): rows/s.
- ``sac_ae``: the SAC-AE learner update (critic, actor, temperature, decoder) on a batch of
  128 84x84 frames, the paper's 39,200 x 50 encoder projection (``lab.train.sac_ae``):
  updates/s.
- ``vsml_es``: VS-ML meta-training with evolution strategies, population 64 split over the
  devices (``lab.train.vsml``): meta-iterations/s.
- ``mpo``: MPO on Pendulum with 8 seeds split over the devices (``lab.train.mpo``): environment
  steps/s over all seeds.

With ``--model M`` every mesh has a ``model`` axis of M devices that splits the wide weight
matrices (ProxProp's and SAC-AE's); the other workloads ignore it.

Where jax finds fewer devices than asked for on the CPU, each count runs with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``: the simulated devices then share the
same cores (2 on the workbench machine), so more devices cannot be faster, and the figures are
a functional check of every sharded code path and of its overhead. Real speed-ups need real
devices (several GPUs, or several hosts after ``lab.parallel.initialize_distributed``).
``--quick`` runs every code path at tiny sizes.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time


def best_rate(run, units: float, repeats: int = 3) -> float:
    """``units`` per second of ``run()`` (which blocks until done): the fastest of
    ``repeats`` calls after a warm-up call that compiles."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return units / best


def measure_mlp(mesh, quick: bool) -> float:
    import equinox as eqx
    import jax
    import numpy as np
    import optax

    from lab import parallel
    from lab.models.feedforward import mlp
    from lab.train.supervised import batch_loss

    widths, batch, steps = [64, 256, 256, 10], 64 if quick else 512, 2 if quick else 20
    optimizer = optax.adam(1e-3)

    def step(model, opt_state, batch):
        grads, metrics = eqx.filter_grad(batch_loss, has_aux=True)(model, *batch)
        updates, opt_state = optimizer.update(grads, opt_state)
        return eqx.apply_updates(model, updates), opt_state, metrics

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    y = rng.integers(0, widths[-1], batch).astype(np.int32)
    model = parallel.shard_params(mlp(widths, key=jax.random.key(0)), mesh)
    state = [model, parallel.shard_params(optimizer.init(eqx.filter(model, eqx.is_array)), mesh)]
    train_step, data = parallel.data_parallel(step, mesh), parallel.shard_batch((x, y), mesh)

    def run():
        for _ in range(steps):
            *state[:], metrics = train_step(*state, data)
        jax.block_until_ready(metrics)

    return best_rate(run, steps)


def measure_proxprop(mesh, quick: bool) -> float:
    import numpy as np

    from lab.train.proxprop import ProxPropConfig, seconds_per_epoch

    rows, features = (256, 64) if quick else (4096, 1024)
    hidden = (32, 16, 32) if quick else (1024, 256, 1024)
    config = ProxPropConfig(hidden=hidden, batch_size=64 if quick else 512, epochs=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    y = rng.integers(0, 10, rows).astype(np.int32)
    seconds = seconds_per_epoch(config, (x, y, x[:rows // 4], y[:rows // 4]), 1.0, mesh=mesh)
    return rows / seconds


def measure_sac_ae(mesh, quick: bool) -> float:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from lab import parallel
    from lab.train import sac_ae

    batch, size, steps = (16, 20, 2) if quick else (128, 84, 4)  # even: both update schedules
    config = sac_ae.SACAEConfig(batch_size=batch, num_filters=4 if quick else 32)
    k_obs, k_action, k_agent = jax.random.split(jax.random.key(0), 3)
    obs = jax.random.randint(k_obs, (batch, size, size, 9), 0, 256).astype(jnp.uint8)
    action = jax.random.uniform(k_action, (batch, 1), minval=-1, maxval=1)
    data = parallel.shard_batch(sac_ae.Batch(obs, action, jnp.ones(batch), obs, jnp.ones(batch)),
                                mesh)
    state = [parallel.shard_params(sac_ae.init(config, k_agent, (size, size, 9), 1), mesh)]
    update = eqx.filter_jit(lambda state, batch: sac_ae.update(config, state, batch, mesh)[0])

    def run():
        for _ in range(steps):
            state[0] = update(state[0], data)
        jax.block_until_ready(state[0])

    return best_rate(run, steps)


def measure_vsml_es(mesh, quick: bool) -> float:
    import jax

    from lab.data import load
    from lab.data.tasks import TaskSource
    from lab.models.vsml import VSMLNetwork
    from lab.train.vsml import MetaConfig, make_meta_train

    iterations = 2 if quick else 10
    x, y = load("digits", "train")
    source = TaskSource(x, y, inputs=16, classes=3, steps=10 if quick else 60)
    config = MetaConfig(method="es", iterations=iterations, tasks=2 if quick else 8,
                        population=16 if quick else 64, lr=0.025)
    train = make_meta_train(config, source, mesh)
    net = VSMLNetwork((16, 3), key=jax.random.key(0))
    return best_rate(lambda: jax.block_until_ready(train(net, jax.random.key(1))[0]),
                     iterations)


def measure_mpo(mesh, quick: bool) -> float:
    import jax

    from lab.envs.control import ControlTask
    from lab.train import mpo

    seeds, steps = 8, 200 if quick else 2000
    config = mpo.MPOConfig(widths=(8, 8) if quick else (64, 64), batch_size=16 if quick else 128,
                           total_steps=steps, eval_every=steps // 2, learning_starts=steps // 4,
                           eval_episodes=1)
    keys = jax.random.split(jax.random.key(0), seeds)
    mesh = None if mesh.devices.size == 1 else mesh
    _, history = mpo.train(config, ControlTask("Pendulum-v1"), keys, mesh=mesh)
    # the training intervals' seconds: compilation and evaluations excluded
    return seeds * history.env_steps[-1] / history.seconds[-1]


WORKLOADS = {"mlp": (measure_mlp, "steps/s"), "proxprop": (measure_proxprop, "rows/s"),
             "sac_ae": (measure_sac_ae, "updates/s"),
             "vsml_es": (measure_vsml_es, "iters/s"), "mpo": (measure_mpo, "env steps/s")}


def worker(name: str, devices: int, model: int, quick: bool) -> None:
    from lab import parallel

    rate = WORKLOADS[name][0](parallel.mesh(devices, model), quick)
    print(json.dumps({"rate": rate}))


def run_worker(name: str, devices: int, model: int, quick: bool, simulate: bool) -> float:
    """The workload's rate in a fresh python; with ``simulate``, one that sees exactly
    ``devices`` simulated CPU devices."""
    env = dict(os.environ)
    if simulate:
        env |= {"JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    command = [sys.executable, __file__, "--worker", name, "--devices", str(devices),
               "--model", str(model)] + (["--quick"] if quick else [])
    out = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])["rate"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--model", type=int, default=1,
                        help="devices of the model axis in every mesh (wide layers split)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.devices[0], args.model, args.quick)
        return
    from lab import parallel  # counts the devices in a child process

    if any(d % args.model for d in args.devices):
        parser.error(f"--model {args.model} must divide every device count {args.devices}")
    count, kind = parallel.available_devices()
    simulate = max(args.devices) > count and kind == "cpu"
    if max(args.devices) > count and not simulate:
        parser.error(f"asked for {max(args.devices)} devices but there are {count} ({kind})")
    devices = "simulated CPU devices" if simulate else f"{count} {kind} devices"
    print(f"# {datetime.date.today()} {platform.node()} {platform.machine()}, "
          f"{os.cpu_count()} cores, {devices}; model axis {args.model}"
          + (" (quick sizes)" if args.quick else ""))
    print(f"{'workload':>9} {'devices':>8} {'rate':>10} {'unit':>12} {'x first':>8}")
    for name in args.workloads:
        base = None
        for devices in args.devices:
            rate = run_worker(name, devices, args.model, args.quick, simulate)
            base = base or rate
            print(f"{name:>9} {devices:>8} {rate:>10.4g} {WORKLOADS[name][1]:>12} "
                  f"{rate / base:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
