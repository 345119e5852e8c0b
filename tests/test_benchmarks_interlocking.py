"""benchmarks/interlocking.py: its quick run on four simulated devices, and its argument
error."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "interlocking.py")


def test_benchmark_interlocking_quick_prints_every_rule_side_by_side():
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--task", "text", "--batch", "4"],
                         capture_output=True, text=True, cwd=ROOT, timeout=2 * WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("text, batch 4, 4 components")
    rows = {line.split()[0]: line for line in lines[2:6]}
    assert list(rows) == ["global", "local", "pairwise", "3-wise"]
    assert rows["local"].split()[5] == "1.00" and rows["global"].split()[6] == "1.00"
    assert lines[6].startswith("on 4 simulated devices")
    assert len(lines) == 11 and all("max |parameter difference|" in line for line in lines[7:])


def test_benchmark_interlocking_refuses_a_bad_batch():
    out = subprocess.run([sys.executable, SCRIPT, "--batch", "0"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "--batch must be at least 1" in out.stderr
