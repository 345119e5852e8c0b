"""benchmarks/early_termination.py runs both measurements and prints their rates."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_benchmark_prints_both_ways_and_every_method():
    out = subprocess.run(
        [sys.executable, "benchmarks/early_termination.py", "--configs", "2", "--steps",
         "400", "--trials", "8", "--orders", "2"], cwd=ROOT, capture_output=True, text=True,
        timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "one at a time" in out.stdout and "vmapped together" in out.stdout
    # a configuration's curve does not depend on the ones beside it: the ratio is fair
    same = re.search(r"NaN where the other has NaN (\w+), largest difference (\S+)", out.stdout)
    assert same and same[1] == "True" and float(same[2]) <= 1e-5, out.stdout
    for method in ("hypertrick", "none", "asha", "hyperband", "median", "sync_halving"):
        assert f"replay {method:>13}:" in out.stdout
