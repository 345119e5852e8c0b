"""benchmarks/vsml.py: its FLOP count against a hand count, and its smoke run."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_benchmark


def _benchmark():
    return load_benchmark("vsml")


def test_benchmark_vsml_tick_flops_match_hand_count():
    # a 2 x 3 layer, state 2, message 1: gates are 8 wide, 6 pairs
    hand = (2 * 2 * 1 * 8  # fwd (2, 1) @ w_fwd (1, 8)
            + 2 * 3 * 1 * 8  # bwd (3, 1) @ w_bwd (1, 8)
            + 2 * 6 * 2 * 8  # h (6, 2) @ w_h (2, 8)
            + 3 * 6 * 8  # row + column + h projection + bias
            + 6 * 6 * 2  # f + 5, i - 5, f c, i tanh g, their sum, o tanh c
            + 2 * 6 * 2  # the means of h over a and over b
            + (2 * 3 * 2 * 1 + 3)  # mean h (3, 2) @ out_fwd (2, 1) + bias
            + (2 * 2 * 2 * 1 + 2))  # mean h (2, 2) @ out_bwd (2, 1) + bias
    assert hand == 537
    assert _benchmark().tick_flops(2, 3, state=2, message=1) == hand


def test_benchmark_vsml_reference_cell_counts():
    bench = _benchmark()
    assert bench.pair_flops() == 2368 and bench.unit_flops() == 1288
    assert bench.episode_flops((16, 32, 3), ticks=2, steps=10) == 20 * (
        bench.tick_flops(16, 32) + bench.tick_flops(32, 3))
    assert bench.micro_ticks((16, 32, 3), ticks=2, steps=10) == 20 * (16 * 32 + 32 * 3)


@pytest.mark.slow
def test_benchmark_vsml_quick_runs():
    script = ROOT / "benchmarks" / "vsml.py"
    out = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    assert "| meta-test 16-32-3 |" in out and "| meta-train ES, population 4 |" in out
    # XLA's own FLOP count of each meta-test program against the analytic one (the same
    # matmuls and gates, plus the elementwise work XLA counts its own way): 1.12-1.13 here;
    # a wrong hand count or a program that does other work would leave this band
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| meta-test")]
    assert len(rows) == 2 and all(0.9 <= float(r[-2]) <= 1.5 for r in rows), rows
