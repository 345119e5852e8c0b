"""Per-device memory and communication of sequence-parallel attention, side by side.

    .venv/bin/python benchmarks/sequence_parallel.py [--length 4096] [--devices 8]
                                                     [--hidden 64] [--heads 4] [--quick]

One train step (Adam) of a one-layer Transformer on one sequence of ``--length`` tokens,
compiled (never run) on one device with full attention and on ``--devices`` simulated CPU
devices with Ring Self-Attention and with blockwise ring attention. For each it prints the
per-device bytes XLA's buffer assignment reports (``lab.parallel.cost.memory``: arguments,
outputs, temporaries) and the bytes each device sends, with the ratios to one device. The
target (issue 22): temporaries at N = 8 at most 0.2x those at N = 1 for a long sequence.

Also one device's blockwise attention (``lab.parallel.ring.blockwise_attention``) against
full attention at the same length. The simulated devices share this machine's cores, so
there is no timing here: memory and bytes only.
"""

import argparse
import datetime
import os
import platform


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a short sequence (512)")
    args = parser.parse_args()
    length = 512 if args.quick else args.length
    if length % args.devices:
        parser.error(f"--length {length} does not divide over --devices {args.devices}; "
                     f"use a multiple of {args.devices}")
    os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                               f"--xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from lab.experiments.sequence_parallel import model_step, single_step
    from lab.parallel import cost

    sizes = dict(batch=1, length=length, hidden=args.hidden, heads=args.heads, layers=1)
    rows = [("one device, full", cost.memory(model_step("sequence", 1, **sizes)), 0),
            ("one device, blockwise 64", cost.memory(single_step("blockwise", **sizes)), 0)]
    for attention in ("rsa", "ring"):
        compiled = model_step("sequence", args.devices, attention=attention, **sizes)
        sent = sum(c["bytes"] for c in cost.summary(cost.collectives(compiled)).values())
        rows.append((f"N={args.devices}, {attention}", cost.memory(compiled), sent))
    print(f"{datetime.date.today()} {platform.node()} ({os.cpu_count()} cores): one train step, "
          f"L={length}, H={args.hidden}, {args.heads} heads, 1 layer, batch 1; "
          "bytes per device")
    base = rows[0][1]
    print(f"{'program':>26} {'arguments':>11} {'temporaries':>12} {'total':>12} "
          f"{'temp ratio':>10} {'total ratio':>11} {'bytes sent':>11}")
    for name, m, sent in rows:
        print(f"{name:>26} {m.arguments:>11,} {m.temporaries:>12,} {m.total:>12,} "
              f"{m.temporaries / base.temporaries:>10.3f} {m.total / base.total:>11.3f} "
              f"{sent:>11,}")


if __name__ == "__main__":
    main()
