"""benchmarks/pixelcnn.py: its quick run prints the three samplers side by side with the
evaluations of the formula, and its argument errors."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "pixelcnn.py")


def test_benchmark_pixelcnn_quick_prints_the_samplers_side_by_side():
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--sizes", "16", "--batch", "2",
                          "--timing-steps", "32", "--repeats", "1", "--train-batch", "4",
                          "--train-models", "multiscale"],
                         capture_output=True, text=True, cwd=ROOT, timeout=2 * WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].endswith("sampling a batch of 2, seconds")
    row = lines[2].split()
    assert row[0] == "16"
    # evaluations: size^2 for the sequential sampler; 4^2 + 3 log2(size / 4) deep ones, and
    # size^2 - 16 shallow ones, for the multiscale models
    assert row[-3:] == ["256", "22", "22+240"]
    assert row[1].endswith("*") and row[2].endswith("*")
    assert "scaled" in lines[3]
    steps = [line.split()[0] for line in lines[5:]]
    assert steps == ["multiscale:"]  # --train-models picks the training steps timed


def test_benchmark_pixelcnn_refuses_a_size_that_is_not_base_times_a_power_of_two():
    out = subprocess.run([sys.executable, SCRIPT, "--sizes", "24"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "image size 24 is not the base size 4 times a power of 2" in out.stderr
