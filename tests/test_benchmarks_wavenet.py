"""benchmarks/wavenet.py: its quick run prints the three samplers side by side and each
training step, and its argument errors."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "wavenet.py")


def test_benchmark_wavenet_quick_prints_the_samplers_side_by_side():
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--lengths", "300", "--widths",
                          "8", "--timing-steps", "16", "--repeats", "1", "--batch", "2",
                          "--length", "512", "--losses", "teacher", "student", "clarinet"],
                         capture_output=True, text=True, cwd=ROOT, timeout=2 * WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].endswith("sampling one utterance at 8000 Hz, samples per second "
                             "(real-time factor)")
    row = lines[2].split()
    assert row[:2] == ["300", "8"]
    ratio_cached, ratio_naive = float(row[-2]), float(row[-1])
    assert 0 < ratio_cached < ratio_naive  # the naive teacher is the slowest of the three
    assert "scaled" in lines[3]
    names = [line.split(":")[0].strip() for line in lines[5:]]
    assert names == ["teacher", "student (M = 4)", "clarinet"]  # --losses picks them


def test_benchmark_wavenet_refuses_a_width_of_zero():
    out = subprocess.run([sys.executable, SCRIPT, "--widths", "0"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "--lengths, --widths, --timing-steps and --batch must be at least 1" in out.stderr
