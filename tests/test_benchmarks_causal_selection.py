"""benchmarks/causal_selection.py --search: the three structure searches side by side on
tiny graphs, and its one-line refusal without causal-learn."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "causal_selection.py"


def test_benchmark_search_prints_each_graph_and_the_means():
    out = subprocess.run([sys.executable, str(SCRIPT), "--search", "--nodes", "4", "--seeds",
                          "2", "--rows", "500"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("structure search: linear-Gaussian SCMs, 500 rows, 2 seeds")
    assert lines[2].split()[:9] == ["nodes", "seed", "edges", "true", "greedy", "GES", "cl",
                                    "GES-cl", "g-GES"]
    for line in lines[3:5]:
        nodes, seed, _, true, greedy, ours, theirs, *_ = line.split()
        assert nodes == "4" and float(ours) <= float(greedy) + 1e-6
        assert float(ours) == float(theirs)  # the same BIC, hence the same class, here
    assert lines[5].startswith("    4 mean: GES - cl +0.0 (worse on 0 of 2)")


def test_benchmark_search_without_causal_learn_refuses_in_one_line():
    run = ("import runpy, sys; sys.modules['causallearn'] = None; "
           f"sys.argv = [{str(SCRIPT)!r}, '--search']; "
           f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "causal-learn is not installed (--search compares with its GES): run "
        "`.venv/bin/pip install -e '.[dev]'` (or `make setup`)"]
