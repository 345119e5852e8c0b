"""What each notebook's smoke run costs in ``make test``: cold, then from the compilation cache.

    .venv/bin/python benchmarks/notebook_smoke.py [--notebooks 02_vsml 03_sac_ae] [--cells 3]

Runs every notebook (or those named) through the runner with the smoke parameters the tests
use (``tests/smoke.py``), twice, one notebook after another on an otherwise idle machine,
compiled as the tests compile (most XLA optimisations off): first with a new, empty
compilation cache (what the test's first run, through the runner, pays), then again with the
cache the first run filled (what its second run, under plain papermill, pays). Prints the
wall time of each, their ratio, the budget (60 s for the cold run on the idle 2-core
machine, the README's rule for new notebooks) and the slowest cells of the cold run, from
papermill's per-cell timings: where to look when a notebook is over. Exits 1 when a run
fails, else 0: over budget is printed, not an error (a timing on a busy machine says little).
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.runs import run_notebook  # noqa: E402
from lab.runs.benchmarking import cpu_model  # noqa: E402
from lab.runs.runner import environ  # noqa: E402
from tests.smoke import SMOKE, compile_settings  # noqa: E402

BUDGET_SECONDS = 60
# compiled as in `make test`; JAX_DISABLE_MOST_OPTIMIZATIONS=0 to time the optimised programs
COMPILE_AS_TESTS = compile_settings(os.environ, sys.executable)


def slowest_cells(executed: Path, count: int) -> list[tuple[float, int, str]]:
    """``(seconds, index, first line)`` of the ``count`` slowest code cells papermill ran."""
    nb = nbformat.read(executed, as_version=4)
    cells = [(c.metadata.get("papermill", {}).get("duration") or 0.0, i,
              c.source.strip().splitlines()[0] if c.source.strip() else "")
             for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    return sorted(cells, reverse=True)[:count]


def timed_run(name: str, out: Path) -> tuple[float, Path]:
    start = time.perf_counter()
    result = run_notebook(ROOT / "notebooks" / f"{name}.ipynb", SMOKE[name], out=out,
                          progress=False)
    seconds = time.perf_counter() - start
    if result.status != "ok":
        raise RuntimeError(f"{name} smoke run {result.status}: {result.error}")
    return seconds, result.run_dir / f"{name}.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", nargs="+", choices=sorted(SMOKE), default=sorted(SMOKE),
                        metavar="NAME", help="notebook stems (default: all)")
    parser.add_argument("--cells", type=int, default=3, help="slowest cells to list")
    args = parser.parse_args(argv)

    print(f"notebook smoke runs, {cpu_model()}, {os.cpu_count()} CPUs; budget "
          f"{BUDGET_SECONDS} s cold")
    print(f"{'notebook':<24}{'cold s':>8}{'cached s':>10}{'ratio':>7}  budget  slowest cells "
          "(cold: seconds, cell)")
    failed = False
    with tempfile.TemporaryDirectory(prefix="lab-smoke-") as tmp:
        for name in args.notebooks:
            cache = Path(tmp) / f"xla-cache-{name}"
            with environ(**COMPILE_AS_TESTS, JAX_COMPILATION_CACHE_DIR=str(cache)):
                try:
                    cold, executed = timed_run(name, Path(tmp) / "cold")
                    cached, _ = timed_run(name, Path(tmp) / "cached")
                except RuntimeError as err:
                    print(f"{name:<24}error: {err}")
                    failed = True
                    continue
            cells = ", ".join(f"{s:.0f} s cell {i} ({line[:28]})"
                              for s, i, line in slowest_cells(executed, args.cells))
            verdict = "ok" if cold <= BUDGET_SECONDS else "OVER"
            print(f"{name:<24}{cold:>8.1f}{cached:>10.1f}{cached / cold:>7.2f}  {verdict:<6}  "
                  f"{cells}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
