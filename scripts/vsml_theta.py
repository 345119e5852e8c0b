"""Write the meta-trained VS-ML thetas shipped in ``lab/experiments/vsml_theta/``.

    python scripts/vsml_theta.py [--seeds 3]

Meta-trains VS-ML exactly as ``notebooks/02_vsml.ipynb`` does with its default parameters
(read from the notebook, so the two cannot drift apart), one file per seed; the notebook
loads them with ``-p theta shipped``. About 1.5 minutes per seed on a 2-core CPU.
"""

import argparse
import time
from pathlib import Path

from lab.experiments.vsml import configure, ship
from lab.runs.params import notebook_parameters
from lab.runs.provenance import git_state

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_vsml.ipynb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None,
                        help="how many seeds (default: the notebook's `seeds`)")
    args = parser.parse_args()
    defaults = {name: p.default for name, p in notebook_parameters(NOTEBOOK).items()}
    setup = configure(**defaults | {"theta": "train", "checkpoint": False})
    commit = git_state(ROOT)  # the commit, and whether tracked files differed from it
    for seed in range(args.seeds or setup.seeds):
        start = time.perf_counter()
        path = ship(setup, seed, commit)
        print(f"seed {seed}: {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB) "
              f"in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
