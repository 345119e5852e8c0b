"""benchmarks/automap.py: its quick run on simulated devices, and its argument error."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "automap.py")


def test_benchmark_automap_quick_prints_ratios_to_megatron():
    out = subprocess.run([sys.executable, SCRIPT, "--quick"], capture_output=True, text=True,
                         cwd=ROOT, timeout=2 * WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "2 x 4 mesh" in lines[0]
    rows = {line[:15].strip(): line[15:].split() for line in lines[2:6]}
    assert list(rows) == ["Megatron", "heuristic", "MLP only", "data parallel"]
    assert float(rows["Megatron"][1]) == 1.0 and float(rows["heuristic"][1]) > 1.0
    assert lines[6].endswith("same collectives and bytes: True")


def test_benchmark_automap_refuses_a_model_axis_that_does_not_divide():
    out = subprocess.run([sys.executable, SCRIPT, "--model", "3"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "--model 3 does not divide --devices 8" in out.stderr
