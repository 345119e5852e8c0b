"""Global, local and n-wise training side by side: step times, modelled pipeline times.

    .venv/bin/python benchmarks/interlocking.py [--task images|text] [--batch 32]
                                                [--pipeline-batches 8] [--quick]

For the notebook's network (the four-component ResNet on Fashion-MNIST, or the character
language model), per rule: the one-device jitted train step's time (every component on one
device, one after another), the time per batch of four pipelined devices under the schedule
model (``lab.parallel.interlocking``, fed with each op timed on its own), its ratio to local
and to global learning, and the devices' mean utilisation. Then the rules run as a real
pipeline on four simulated CPU devices (one thread per device): the measured time per batch
beside the model's. Simulated devices share this machine's 2 cores, so the measured pipeline
cannot run faster than one device: its figure checks the schedule's waits, not a speed-up.
"""

import argparse
import datetime
import os
import platform
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="images", choices=("images", "text"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--pipeline-batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a narrow network, few repeats")
    args = parser.parse_args()
    if args.batch < 1 or args.pipeline_batches < 0:
        parser.error("--batch must be at least 1 and --pipeline-batches at least 0")
    os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                               "--xla_force_host_platform_device_count=4").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import equinox as eqx
    import jax

    from lab.experiments import interlocking as experiment
    from lab.parallel import interlocking as schedule
    from lab.train import interlocking as train

    quick = args.quick
    params = {"tasks": [args.task], "rules": ["global", "local", "pairwise", "3-wise"],
              "seeds": 1, "channels": 4 if quick else 8, "blocks": 1 if quick else 2,
              "head_channels": 4, "image_batch": args.batch, "image_steps": 1, "image_lr": 1e-3,
              "image_target": 0.5, "hidden": 16 if quick else 32, "heads": 4,
              "length": 16 if quick else 64, "head_blocks": 0, "text_batch": args.batch,
              "text_steps": 1, "text_lr": 1e-3, "text_lr_grid": [], "text_lr_select_steps": 1,
              "text_target": 3.0, "eval_every": 1, "eval_examples": 8,
              "timing_repeats": 3 if quick else args.repeats,
              "pipeline_batches": 4 if quick else args.pipeline_batches, "seed": 0}
    setup = experiment.configure(**params)
    task = experiment.task(setup, args.task)
    print(f"{args.task}, batch {args.batch}, {experiment.COMPONENTS} components; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{datetime.date.today()}")
    stack = task.init(jax.random.key(0))
    x, y = task.batch
    timing = experiment.timings(setup, args.task)
    per_batch = {r: v["time_per_batch"] for r, v in timing["rules"].items()}
    print(f"{'rule':>9} {'step, 1 device':>15} {'pipelined':>10} {'/ local':>8} "
          f"{'/ global':>8} {'utilisation':>11}")
    for rule in setup.rules:
        opt = experiment.optimizer(task)
        step = train.make_step(opt, train.rule_n(rule, experiment.COMPONENTS), train.cross_entropy)
        state = opt.init(eqx.filter(stack, eqx.is_inexact_array))
        jax.block_until_ready(step(stack, state, x, y))
        begin = time.perf_counter()
        for _ in range(setup.timing_repeats):
            out = step(stack, state, x, y)
        jax.block_until_ready(out)
        one_device = (time.perf_counter() - begin) / setup.timing_repeats
        print(f"{rule:>9} {1e3 * one_device:>12.2f} ms {1e3 * per_batch[rule]:>7.2f} ms "
              f"{per_batch[rule] / per_batch['local']:>8.2f} "
              f"{per_batch[rule] / per_batch['global']:>8.2f} "
              f"{timing['rules'][rule]['mean_utilisation']:>11.2f}")
    if setup.pipeline_batches:
        print("on 4 simulated devices (2 shared cores: waits, not speed):")
        # the model is fed the op times measured above, as in the notebook
        times = schedule.Times(**timing["times"])
        for row in experiment.pipeline_check(setup, args.task, times):
            print(f"{row['rule']:>9} measured {1e3 * row['measured_per_batch']:>7.2f} ms per "
                  f"batch, model {1e3 * row['modelled_per_batch']:>7.2f} ms, replay "
                  f"{1e3 * row['replay_per_batch']:>7.2f} ms; max |parameter difference| "
                  f"from the jitted steps {row['param_error']:.1e}")


if __name__ == "__main__":
    main()
