"""Parallel WaveNet: sampling throughput of the naive teacher, the cached teacher and the
student side by side, and training step times.

    .venv/bin/python benchmarks/wavenet.py [--lengths 1000 4000 16000] [--widths 16 32 64]
                                           [--timing-steps 256] [--losses teacher ...]
                                           [--quick]

Per length (at the first width) and per width (at the longest length): samples per second of
each sampler drawing one utterance, the real-time factor (samples per second over the
8 kHz sample rate) and the student's speed-up over each teacher sampler. The naive teacher
is timed over its first ``--timing-steps`` samples and scaled (every one of its steps is the
same pass over the receptive field). Then one Adam step of the teacher and of each
distillation loss (M = 1, 4, 32; ClariNet) on a batch of crops. The models are the
notebook's (``notebooks/13_parallel_wavenet.ipynb``) default shapes with untrained weights.
"""

import argparse
import datetime
import os
import platform
import time

LOSSES = ("teacher", "draws_1", "student", "draws_32", "clarinet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 4000, 16000])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--timing-steps", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024,
                        help="samples per training crop (teacher and students alike)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=LOSSES,
                        help="training steps to time (each compiles its own program)")
    parser.add_argument("--quick", action="store_true", help="small models, short crops")
    args = parser.parse_args()
    if min(args.lengths + args.widths) < 1 or args.timing_steps < 1 or args.batch < 1:
        parser.error("--lengths, --widths, --timing-steps and --batch must be at least 1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from lab.experiments import wavenet as experiment
    from lab.train import wavenet as train

    small = ({"teacher_layers": 4, "cycle": 4, "mixtures": 3, "flows": 2, "student_layers": 3}
             if args.quick else {})
    params = {"sample_rate": 8000, "bands": 20, "sentences": None, "held_out": 4,
              "teacher_channels": args.widths[0], "teacher_layers": 10, "cycle": 10,
              "mixtures": 5, "teacher_steps": 1, "teacher_lr": 1e-3, "flows": 4,
              "student_channels": args.widths[0], "student_layers": 6, "student_steps": 1,
              "student_lr": 1e-3, "batch": args.batch, "length": args.length,
              "student_batch": args.batch, "student_length": args.length, "chunk": 1,
              "eval_every": 1, "draws": 4, "power_weight": 0.1, "variants": ["student"],
              "eval_utterances": 1, "timing_lengths": args.lengths, "timing_widths": args.widths,
              "timing_steps": args.timing_steps, "timing_repeats": max(args.repeats, 1),
              "seed": 0} | small
    try:
        setup = experiment.configure(**params)
    except ValueError as error:
        parser.error(str(error))

    print(f"{datetime.date.today()} {platform.node()} "
          f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{jax.devices()[0].platform}): sampling one utterance at {setup.sample_rate} Hz, "
          f"samples per second (real-time factor)")
    print(f"{'length':>7} {'width':>5} {'naive':>17} {'cached':>17} {'student':>19} "
          f"{'student/cached':>15} {'student/naive':>14}")
    longest = max(args.lengths)
    combos = [(n, args.widths[0]) for n in args.lengths]
    combos += [(longest, w) for w in args.widths[1:]]
    for length, width in combos:
        row = experiment.time_samplers(setup, length, width, args.repeats)
        rate, rtf = row["samples_per_second"], row["real_time_factor"]
        cells = [f"{rate[k]:>9,.0f} ({rtf[k]:>5.3g})" for k in ("naive", "cached", "student")]
        mark = "*" if row["naive_measured"] < length else " "
        print(f"{length:>7} {width:>5} {cells[0]}{mark}{cells[1]:>18} {cells[2]:>19} "
              f"{rate['student'] / rate['cached']:>15.1f} "
              f"{rate['student'] / rate['naive']:>14.1f}")
    print(f"* timed over the first {args.timing_steps} samples and scaled to all of them")

    # training steps on random crops of a synthetic signal (the cost does not depend on it)
    from lab.data.speech import synthetic

    audio = synthetic(4.0, setup.sample_rate)
    cond = experiment.conditioning(audio, setup)
    audio, cond = jnp.asarray(audio), jnp.asarray(cond)
    key = jax.random.key(0)
    teachers = {kind: experiment.build_teacher(setup, key, kind)
                for kind in ("mixture", "gaussian")}
    print(f"one Adam step on {args.batch} crops of {args.length} samples, ms "
          f"(best of {args.repeats}):")
    jobs = ([("teacher", experiment.build_teacher(setup, key), train.teacher_loss, None)]
            if "teacher" in args.losses else [])
    for variant in [v for v in LOSSES[1:] if v in args.losses]:
        base = "gaussian" if variant == "clarinet" else "logistic"
        jobs.append((f"{variant} (M = {experiment.draws_of(variant, setup.draws)})"
                     if variant != "clarinet" else "clarinet", experiment.build_student(
                         setup, key, base), experiment.student_loss(setup, variant),
                     teachers[experiment.teacher_of(variant)]))
    for name, model, loss, frozen in jobs:
        optimizer = optax.adam(1e-3)
        run = train.make_train(loss, optimizer, args.batch, args.length, 1)
        state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        jax.block_until_ready(run(model, state, audio, cond, key, frozen))
        best = np.inf
        for _ in range(args.repeats):
            begin = time.perf_counter()
            jax.block_until_ready(run(model, state, audio, cond, key, frozen))
            best = min(best, time.perf_counter() - begin)
        print(f"  {name:>17}: {1e3 * best:8.1f} ms, {experiment.parameter_count(model):,} "
              "parameters")


if __name__ == "__main__":
    main()
