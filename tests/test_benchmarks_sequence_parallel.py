"""benchmarks/sequence_parallel.py: its quick run on simulated devices, and its argument error."""

import subprocess
import sys

from tests.conftest import ROOT, WAIT

SCRIPT = str(ROOT / "benchmarks" / "sequence_parallel.py")


def test_benchmark_sequence_parallel_quick_prints_ratios_to_one_device():
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--devices", "4"],
                         capture_output=True, text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "L=512" in lines[0]
    rows = {line[:26].strip(): line[26:].split() for line in lines[2:]}
    assert list(rows) == ["one device, full", "one device, blockwise 64", "N=4, rsa", "N=4, ring"]
    assert float(rows["one device, full"][3]) == 1.0
    # a quarter of the sequence per device: far fewer temporaries than one device's
    assert float(rows["N=4, rsa"][3]) < 0.5 and float(rows["N=4, ring"][3]) < 0.5
    assert int(rows["N=4, rsa"][-1].replace(",", "")) > 0  # the rings send bytes


def test_benchmark_sequence_parallel_refuses_a_length_that_does_not_divide():
    out = subprocess.run([sys.executable, SCRIPT, "--length", "100"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT)
    assert out.returncode == 2
    assert "--length 100 does not divide over --devices 8" in out.stderr
