"""Named layouts of a Transformer's train step priced by the compiler, side by side.

    .venv/bin/python benchmarks/automap.py [--layers 1] [--hidden 256] [--batch 8]
                                           [--length 32] [--devices 8] [--model 4] [--quick]

The train step (Adam) of a ``--layers`` Transformer on a ``data x model`` mesh of simulated
CPU devices, compiled (never run) under Megatron's layout, ``lab.parallel``'s shape heuristic,
Megatron in the MLP only and pure data parallelism: collective bytes and count per device,
per-device bytes, each with its ratio to Megatron's. Then what one search step costs: the
seconds to lower and compile a candidate with the scorer's LLVM -O0 option against the
default compile (the collectives and bytes are the same; a test checks it). The issue's
figure to compare with: the heuristic at about 1.7x Megatron's collective bytes on one block
of a 2 x 4 mesh. Simulated devices share this machine's cores: bytes, not speed.
"""

import argparse
import datetime
import os
import platform
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--model", type=int, default=4, help="devices on the model axis")
    parser.add_argument("--quick", action="store_true", help="a narrow block (hidden 64)")
    args = parser.parse_args()
    if args.devices % args.model:
        parser.error(f"--model {args.model} does not divide --devices {args.devices}")
    os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                               f"--xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from lab.experiments import automap as experiment
    from lab.parallel import automap

    params = {"devices": args.devices, "model_devices": args.model, "vocab": 64,
              "hidden": 64 if args.quick else args.hidden, "heads": 4, "batch": args.batch,
              "length": args.length, "axes": ["model"], "exhaustive_axes": ["model"],
              "memory_weight": 0.01, "stack_layers": [args.layers], "budget": 1, "seeds": 1,
              "searchers": ["greedy"], "exploration": 0.1, "regime_batch": [args.batch],
              "regime_length": [args.length], "regime_budgets": [1.0], "regime_compiles": 1,
              "exhaustive_limit": 0, "seed": 0}
    try:
        setup = experiment.configure(**params)
    except ValueError as error:
        parser.error(str(error))
    p = experiment.problem(setup, args.layers)
    named = p.named()
    costs = {name: p.scorer(p.space.layout(choice)) for name, choice in named.items()}
    reference = costs["Megatron"]
    print(f"{datetime.date.today()} {platform.node()} ({os.cpu_count()} cores): one train step, "
          f"{args.layers} block(s) of width {setup.hidden}, batch {args.batch} x length "
          f"{args.length}, {args.devices // args.model} x {args.model} mesh (simulated)")
    print(f"{'layout':<15}{'collective bytes':>17}{'x Megatron':>11}{'collectives':>12}"
          f"{'bytes/device':>14}{'x Megatron':>11}")
    for name, c in costs.items():
        ratio = c.collective_bytes / reference.collective_bytes
        print(f"{name:<15}{c.collective_bytes:>17,}{ratio:>11.3f}{c.collectives:>12}"
              f"{c.memory:>14,}{c.memory / reference.memory:>11.3f}")
    default = automap.Scorer(p.scorer.loss, p.scorer.optimizer, p.scorer.model, p.scorer.batch,
                             p.scorer.mesh, compiler_options=None)
    layout = p.space.layout(named["Megatron"])
    start = time.perf_counter()
    same = default(layout)[:3] == reference[:3]
    slow = time.perf_counter() - start
    print(f"compile per candidate: -O0 {reference.seconds:.2f} s, default {slow:.2f} s "
          f"({reference.seconds / slow:.2f}x); same collectives and bytes: {same}")


if __name__ == "__main__":
    main()
