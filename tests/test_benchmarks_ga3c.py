"""benchmarks/ga3c.py runs the three executions side by side and prints both ratios."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_benchmark_prints_every_execution_and_both_ratios():
    out = subprocess.run(
        [sys.executable, "benchmarks/ga3c.py", "--agents", "16", "--a2c-envs", "4",
         "--seconds", "0.5"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    assert [r[:2] for r in rows if r and r[0] in ("ga3c", "a3c", "a2c")] == [
        ["ga3c", "16"], ["a3c", "16"], ["a2c", "4"]]
    assert "ga3c/a3c at 16 agents:" in out.stdout and "a2c/ga3c:" in out.stdout
    assert "target of 3x" in out.stdout and "target of 100x" in out.stdout
    assert "kFLOP per forward pass" in out.stdout and "GFLOP/s at" in out.stdout
