"""Helpers the scripts in ``benchmarks/`` share: timing a jitted call and naming the CPU."""

import platform
import time
from collections.abc import Callable

import jax
import numpy as np


def timed(fn: Callable, repeats: int, *, warmup: int = 0) -> tuple[float, float, float]:
    """``(first, best, median)`` seconds of ``fn()``: the first call (with its compilation),
    then ``warmup`` untimed calls, then the best and the median of ``repeats`` timed calls.
    Every call waits for its result (``jax.block_until_ready``)."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return first, min(times), float(np.median(times))


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
