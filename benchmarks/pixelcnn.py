"""Sequential against multiscale PixelCNN: sampling time per resolution, and training steps.

    .venv/bin/python benchmarks/pixelcnn.py [--sizes 16 32 64 128] [--batch 4]
                                            [--timing-steps 256] [--quick]

Per resolution, the seconds to sample a batch from the sequential gated PixelCNN (one
network evaluation per pixel: naive, on the whole canvas, and windowed, on the rows the pixel
sees), the multiscale model (base image + three group networks per doubling) and its shallow
variant, side by side, with the ratios of the windowed sampler's time to theirs and the
evaluations each sampler counted. Above ``--timing-steps`` pixels the sequential samplers are
timed over their first ``--timing-steps`` pixels and scaled (every step costs the same).
Then one Adam training step of each model on a batch of 32x32 binary images. The models are
the notebook's (``notebooks/12_pixelcnn.ipynb``) default widths with untrained weights.
"""

import argparse
import datetime
import os
import platform
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--timing-steps", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-models", nargs="+", default=None,
                        help="models whose training step is timed (default: every one; each "
                             "compiles its own program)")
    parser.add_argument("--quick", action="store_true", help="narrow models, small sizes")
    args = parser.parse_args()
    if args.batch < 1 or args.timing_steps < 1 or args.train_batch < 1:
        parser.error("--batch, --timing-steps and --train-batch must be at least 1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import equinox as eqx
    import jax
    import numpy as np
    import optax

    from lab.experiments import pixelcnn as experiment
    from lab.train import pixelcnn as train

    widths = ({"channels": 8, "layers": 2, "base_channels": 8, "base_layers": 1,
               "group_channels": 8} if args.quick else {})
    params = {"dataset": "fashion_mnist", "levels": 2, "models": list(experiment.MODELS),
              "seeds": 1, "steps": 1, "batch": args.train_batch, "lr": 1e-3, "eval_every": 1,
              "eval_examples": 1, "channels": 26, "layers": 5, "base": 4, "base_channels": 16,
              "base_layers": 3, "group_channels": 16, "group_blocks": 1,
              "timing_sizes": args.sizes, "timing_batch": args.batch,
              "timing_steps": args.timing_steps, "timing_repeats": args.repeats,
              "samples": 1, "seed": 0} | widths
    try:
        setup = experiment.configure(**params)
    except ValueError as error:
        parser.error(str(error))
    key = jax.random.key(0)
    unknown = set(args.train_models or ()) - set(experiment.MODELS)
    if unknown:
        parser.error(f"unknown --train-models {', '.join(sorted(unknown))}; choose from "
                     f"{', '.join(experiment.MODELS)}")

    print(f"{datetime.date.today()} {platform.node()} "
          f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{jax.devices()[0].platform}): sampling a batch of {args.batch}, seconds")
    print(f"{'size':>5} {'naive':>10} {'windowed':>10} {'multiscale':>11} {'shallow':>9} "
          f"{'win/multi':>10} {'win/shallow':>12} {'evaluations (seq, multi, shallow)':>36}")
    for size in setup.timing_sizes:
        rows = {kind: experiment.time_sampling(
            experiment.build(setup, "sequential" if kind == "windowed" else kind, size, key),
            size, args.batch, args.timing_steps, key, args.repeats, windowed=kind == "windowed")
            for kind in experiment.samplers(setup)}
        naive, windowed, multi, shallow = (rows[k] for k in ("sequential", "windowed",
                                                             "multiscale", "shallow"))
        mark = "*" if naive["extrapolated"] else " "
        print(f"{size:>5} {naive['seconds']:>9.4g}{mark} {windowed['seconds']:>9.4g}{mark} "
              f"{multi['seconds']:>11.4g} {shallow['seconds']:>9.4g} "
              f"{windowed['seconds'] / multi['seconds']:>10.1f} "
              f"{windowed['seconds'] / shallow['seconds']:>12.1f} "
              f"{naive['deep']:>15} {multi['deep']:>6} {shallow['deep']:>5}+{shallow['shallow']}")
    print(f"* timed over the first {args.timing_steps} pixels and scaled to all of them")

    x = experiment.images("fashion_mnist", "test", 2)[:args.train_batch]
    print(f"one Adam step on {args.train_batch} images of 32x32, ms (best of {args.repeats}):")
    opt = optax.adam(1e-3)

    @eqx.filter_jit
    def step(model, state, x):
        loss, grads = eqx.filter_value_and_grad(train.nll)(model, x)
        updates, state = opt.update(grads, state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), state, loss

    for kind in args.train_models or experiment.MODELS:
        model = experiment.build(setup, kind, experiment.SIZE, key)
        state = opt.init(eqx.filter(model, eqx.is_inexact_array))
        jax.block_until_ready(step(model, state, x))
        best = np.inf
        for _ in range(args.repeats):
            begin = time.perf_counter()
            jax.block_until_ready(step(model, state, x))
            best = min(best, time.perf_counter() - begin)
        print(f"  {kind:>10}: {1e3 * best:8.1f} ms, "
              f"{experiment.parameter_count(model):,} parameters")


if __name__ == "__main__":
    main()
