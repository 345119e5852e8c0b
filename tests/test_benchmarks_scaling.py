"""benchmarks/scaling.py: its smoke run on simulated devices, and its argument errors."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "scaling.py")


def test_benchmark_scaling_quick_runs_on_simulated_devices():
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--workloads", "mlp", "--devices",
                          "2", "4", "--model", "2"], capture_output=True, text=True, cwd=ROOT,
                         timeout=WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "simulated CPU devices; model axis 2" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [(r[0], r[1]) for r in rows] == [("mlp", "2"), ("mlp", "4")]
    assert float(rows[0][-1]) == 1.0 and float(rows[1][2]) > 0


def test_benchmark_scaling_refuses_a_model_axis_that_does_not_divide():
    out = subprocess.run([sys.executable, SCRIPT, "--devices", "2", "3", "--model", "2"],
                         capture_output=True, text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "--model 2 must divide every device count [2, 3]" in out.stderr
