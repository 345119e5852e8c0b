"""Speed of VS-ML on this machine: meta-test micro-ticks per second, the achieved FLOP rate
as a fraction of the float32 matmul peak, and meta-training iterations per second, in one run.

    .venv/bin/python benchmarks/vsml.py [--quick] [--sizes 16-3 784-10] [--populations 64]

Runs on whatever JAX backend is present. The first call of every function compiles (its
time is printed); after warm-up calls, the times are the best and the median of at least
``--repeats`` calls and half a second. ``--quick`` is a smoke run of the same code paths at
tiny sizes (mostly compilation: about a minute on 2 busy CPU cores).

- Meta-test: the online episode of ``VSMLNetwork(sizes)`` (2 ticks), jitted and vmapped over
  a batch of episodes, on random inputs. A micro-tick is one sub-LSTM update of one pair
  ``(a, b)`` of one layer: micro-ticks per call = episodes x steps x ticks x sum over layers
  of n_in * n_out.
- Ceilings: the best FLOP rate of a jitted float32 ``jnp.dot`` of square matrices
  (``--peak`` sizes) at the default matmul precision, the one the model runs at; and the
  rate of a jitted float32 ``tanh`` over 4M elements (the gate math needs 5 sigmoids and
  tanh per state channel). Their bound on micro-ticks per second takes a pair's FLOPs at
  the matmul peak and its 80 transcendentals at the tanh rate, one after the other.
- Meta-training: ``make_meta_train`` at the notebook's default configuration (16 inputs,
  3 classes, 60 steps, 8 tasks per iteration) on digits tasks, with meta-gradients and
  with ES at populations 64 and 256. The ratio is the time per iteration over the
  meta-gradient's; GFLOP/s counts ES's forward episodes only.

FLOPs of one tick of a layer of ``A`` inputs and ``B`` outputs, ``s`` state and ``m``
message channels (:func:`tick_flops`; a multiply-add is 2 FLOPs, a mean of n values n):

    A*B * (8 s^2 + 20 s)  +  (A + B) * (10 s m + m)

per pair (:func:`pair_flops`): ``h @ w_h`` (2 * s * 4s), adding the row, column and h
projections and the bias into the 4s gates (3 * 4s), the gate arithmetic (f + 5, i - 5,
f c, i tanh g, their sum, o tanh c: 6s) and its share of the two means of h (2s); per input
and per output unit, once (:func:`unit_flops`): ``fwd @ w_fwd`` or ``bwd @ w_bwd``
(2 * m * 4s) and the output projection of its mean state, with bias (2 s m + m). With
s = 16, m = 8: 2368 FLOPs per pair and 1288 per unit, plus 5s = 80 transcendentals per pair
(3 sigmoids, 2 tanh), counted apart as XLA counts them. The column ``XLA/analytic``
divides XLA's own cost analysis of one compiled tick of each layer by this count; XLA also
counts the sigmoid's expansion (negate, exp, add, divide) and any recomputation its fusions chose.
"""

import argparse
import datetime
import os
import platform
import time
from itertools import pairwise

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab.data import TaskSource, load
from lab.models.vsml import VSMLNetwork, init_layer_state
from lab.runs.benchmarking import cpu_model
from lab.train.vsml import MetaConfig, make_meta_train

# name: (layer sizes, meta-test episodes per call)
META_TEST = {"16-3": ((16, 3), 64), "64-10": ((64, 10), 64), "784-10": ((784, 10), 4),
             "16-32-3": ((16, 32, 3), 64)}
POPULATIONS = (64, 256)
TRANSCENDENTALS_PER_CHANNEL = 5  # sigmoid(i), tanh(g), sigmoid(f), sigmoid(o), tanh(c)


def pair_flops(state: int = 16, message: int = 8) -> int:
    """FLOPs of one micro-tick of one pair, besides the per-unit projections (module doc)."""
    del message  # the message-sized work is per unit
    return 8 * state * state + 20 * state


def unit_flops(state: int = 16, message: int = 8) -> int:
    """FLOPs per input or output unit and tick: its message's projection to the 4s gates and
    the projection of its mean state to the message it sends."""
    return 10 * state * message + message


def tick_flops(n_in: int, n_out: int, state: int = 16, message: int = 8) -> int:
    """FLOPs of one micro-tick of every pair of an ``n_in`` x ``n_out`` layer."""
    return n_in * n_out * pair_flops(state, message) + (n_in + n_out) * unit_flops(state, message)


def episode_flops(sizes, *, ticks: int, steps: int, state: int = 16, message: int = 8) -> int:
    """FLOPs of the VS-ML ticks of one episode of ``steps`` online steps."""
    return steps * ticks * sum(tick_flops(a, b, state, message) for a, b in pairwise(sizes))


def micro_ticks(sizes, *, ticks: int, steps: int) -> int:
    """Sub-LSTM updates in one episode of ``steps`` online steps."""
    return steps * ticks * sum(a * b for a, b in pairwise(sizes))


def timed(fn, *args, repeats: int, seconds: float = 0.5) -> tuple[float, float, float]:
    """(first, best, median) seconds of ``fn(*args)``. The first call compiles; calls go on
    warming up (allocations, threads) for ``seconds / 2``, then best and median are over at
    least ``repeats`` calls and ``seconds``."""

    def call():
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        return time.perf_counter() - start

    first = call()
    warm = 0.0
    while warm < seconds / 2:
        warm += call()
    times = [call()]
    while len(times) < repeats or sum(times) < seconds:
        times.append(call())
    return first, min(times), float(np.median(times))


def matmul_peak(sizes, repeats: int) -> tuple[float, dict[int, float]]:
    """Best float32 FLOP/s of a jitted square ``jnp.dot`` over ``sizes``, and per size."""
    dot = jax.jit(jnp.dot)
    rates = {}
    for n in sizes:
        a, b = jax.random.normal(jax.random.key(n), (2, n, n), jnp.float32)
        rates[n] = 2 * n**3 / timed(dot, a, b, repeats=repeats)[1]
    return max(rates.values()), rates


def tanh_rate(repeats: int, n: int = 1 << 22) -> float:
    """Jitted float32 ``tanh`` evaluations per second over ``n`` elements."""
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32)
    return n / timed(jax.jit(jnp.tanh), x, repeats=repeats)[1]


def xla_tick_flops(net: VSMLNetwork) -> float | None:
    """XLA's cost-analysis FLOPs of one compiled tick of every layer, summed; None where the
    backend gives none."""
    cell, m = net.cell, net.cell.message_size
    tick = jax.jit(lambda cell, fwd, bwd, state: cell.tick(fwd, bwd, state))
    total = 0.0
    for a, b in pairwise(net.sizes):
        state = init_layer_state(jax.random.key(0), a, b, cell.state_size)
        cost = tick.lower(cell, jnp.ones((a, m)), jnp.ones((b, m)), state).compile()
        cost = cost.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        if not cost or "flops" not in cost:
            return None
        total += cost["flops"]
    return total


def meta_test_rows(args, peak: float, bound: float) -> list[tuple]:
    run = eqx.filter_jit(lambda net, xs, ys, keys: jax.vmap(net)(xs, ys, keys))
    rows = []
    for name in args.sizes:
        sizes, episodes = META_TEST[name]
        episodes = args.episodes or episodes
        net = VSMLNetwork(sizes, ticks=args.ticks, key=jax.random.key(0))
        k_x, k_y, k_run = jax.random.split(jax.random.key(1), 3)
        xs = jax.random.normal(k_x, (episodes, args.steps, sizes[0]))
        ys = jax.random.randint(k_y, (episodes, args.steps), 0, sizes[-1])
        first, best, median = timed(run, net, xs, ys, jax.random.split(k_run, episodes),
                                    repeats=args.repeats)
        ticks = episodes * micro_ticks(sizes, ticks=args.ticks, steps=args.steps)
        flops = episodes * episode_flops(sizes, ticks=args.ticks, steps=args.steps)
        xla = xla_tick_flops(net)
        analytic = sum(tick_flops(a, b) for a, b in pairwise(sizes))
        rows.append((f"meta-test {name}", f"{episodes} ep x {args.steps} steps", first, best,
                     median, f"{ticks / best:.3g} micro-ticks/s", flops / best / 1e9,
                     f"{flops / best / peak:.2f} of peak, {ticks / best / bound:.2f} of bound",
                     "-" if xla is None else f"{xla / analytic:.2f}"))
    return rows


def meta_train_rows(args) -> list[tuple]:
    x, y = load("digits", "train")
    source = TaskSource(x, y, inputs=16, classes=3, steps=args.meta_steps)
    net = VSMLNetwork((16, 3), key=jax.random.key(0))
    runs = [("gradient", 2, 3e-3)] + [("es", p, 0.025) for p in args.populations]
    rows, base = [], None
    for method, population, lr in runs:
        config = MetaConfig(method=method, iterations=args.meta_iterations, tasks=8, lr=lr,
                            population=population)
        first, best, median = timed(make_meta_train(config, source), net, jax.random.key(2),
                                    repeats=args.repeats)
        per_iteration = best / args.meta_iterations
        base = base or per_iteration
        name, gflops = "meta-gradient", "-"
        if method == "es":
            name = f"ES, population {population}"
            flops = population * 8 * episode_flops((16, 3), ticks=2, steps=args.meta_steps)
            gflops = flops / per_iteration / 1e9
        rows.append((f"meta-train {name}", f"{args.meta_iterations} it x 8 tasks x "
                     f"{args.meta_steps} steps", first, best, median,
                     f"{1 / per_iteration:.3g} it/s", gflops,
                     f"{per_iteration / base:.1f} x gradient", "-"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 networks, tiny batches, 1 iteration, ES population 4")
    parser.add_argument("--sizes", nargs="+", default=list(META_TEST), choices=list(META_TEST),
                        help="meta-test networks")
    parser.add_argument("--steps", type=int, default=100, help="meta-test episode length")
    parser.add_argument("--episodes", type=int, default=0,
                        help="meta-test episodes per call (0: per network, see META_TEST)")
    parser.add_argument("--ticks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peak", type=int, nargs="+", default=[1024, 2048, 4096],
                        help="square matmul sizes for the float32 peak")
    parser.add_argument("--meta-iterations", type=int, default=3)
    parser.add_argument("--meta-steps", type=int, default=60)
    parser.add_argument("--populations", type=int, nargs="+", default=list(POPULATIONS))
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps, args.episodes, args.repeats = ["16-3", "16-32-3"], 5, 2, 1
        args.peak, args.meta_iterations, args.meta_steps, args.populations = [256], 1, 10, [4]

    device = jax.devices()[0]
    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.node()}, {cpu_model()} "
          f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}), "
          f"jax {jax.__version__}, backend {jax.default_backend()} ({device.device_kind})")
    peak, rates = matmul_peak(args.peak, args.repeats)
    tanh = tanh_rate(args.repeats)
    pair = pair_flops()
    transcendentals = TRANSCENDENTALS_PER_CHANNEL * 16
    print(f"float32 matmul peak {peak / 1e9:.1f} GFLOP/s (" + ", ".join(
        f"{n}: {r / 1e9:.1f}" for n, r in rates.items()) + f"); float32 tanh {tanh / 1e9:.2f} G/s")
    bound = 1 / (pair / peak + transcendentals / tanh)
    print(f"per micro-tick (s = 16, m = 8): {pair} FLOPs per pair + {unit_flops()} per unit, and "
          f"{transcendentals} sigmoids and tanh; the bound: at the matmul peak and the tanh "
          f"rate, one after the other, {bound:.3g} micro-ticks/s\n")
    rows = meta_test_rows(args, peak, bound) + meta_train_rows(args)
    print("| benchmark | batch | first call s | best ms | median ms | rate | GFLOP/s | ratio "
          "| XLA/analytic |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, batch, first, best, median, rate, gflops, ratio, xla in rows:
        gflops = gflops if isinstance(gflops, str) else f"{gflops:.2f}"
        print(f"| {what} | {batch} | {first:.1f} | {1e3 * best:.1f} | {1e3 * median:.1f} | "
              f"{rate} | {gflops} | {ratio} | {xla} |")


if __name__ == "__main__":
    main()
