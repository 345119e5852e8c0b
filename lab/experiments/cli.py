"""``python -m lab``: run notebooks into reports, rebuild the index.

    python -m lab run notebooks/00_quickstart.ipynb -p epochs 2 [--out reports]
    python -m lab run --all [--notebooks notebooks] [--force]   # reuses unchanged runs
    python -m lab report
    python -m lab sweep run sweeps/mpo_pendulum.yaml [--workers 4] [--storage URL]
    python -m lab sweep worker --storage URL --study NAME      # join from any machine
    python -m lab sweep report --storage URL --study NAME
"""

import argparse
import sys
from pathlib import Path

from lab.experiments.params import ParameterError
from lab.experiments.report import build_index
from lab.experiments.runner import (
    DEFAULT_CELL_TIMEOUT,
    INTERRUPTED,
    OK,
    RunnerError,
    run_all,
    run_notebook,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute notebooks and write their reports")
    run.add_argument("notebook", nargs="?", type=Path, help="the .ipynb file to run")
    run.add_argument("--all", action="store_true", help="run every notebook with its defaults")
    run.add_argument("--notebooks", type=Path, default=Path("notebooks"),
                     help="folder that --all runs (default: notebooks)")
    run.add_argument("--force", action="store_true",
                     help="with --all: run every notebook, even one whose inputs are "
                     "unchanged since its last ok run")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="override a parameter (repeatable)")
    run.add_argument("--out", type=Path, default=Path("reports"),
                     help="reports folder (default: reports)")
    run.add_argument("--timeout", type=int, default=DEFAULT_CELL_TIMEOUT,
                     help=f"seconds one cell may run (default: {DEFAULT_CELL_TIMEOUT})")
    run.add_argument("--hide-code", action="store_true", help="leave code out of the HTML")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    report = commands.add_parser("report", help="rebuild <out>/index.html and "
                                 "<out>/claims.html from the runs")
    report.add_argument("--out", type=Path, default=Path("reports"))
    sweep = commands.add_parser("sweep", help="parameter sweeps with early termination")
    actions = sweep.add_subparsers(dest="action", required=True)
    start = actions.add_parser("run", help="create a study from a YAML spec and run it here")
    start.add_argument("spec", type=Path, help="the sweep's YAML file")
    start.add_argument("--workers", type=int, help="worker processes (default: the spec's)")
    worker = actions.add_parser("worker", help="run a study's waiting trials (any machine)")
    worker.add_argument("--worker", type=int, default=0, help="this worker's index (seeds TPE)")
    show = actions.add_parser("report", help="write the sweep's HTML report")
    for action in (start, worker, show):
        action.add_argument("--storage", help="Optuna storage URL (default: a SQLite file "
                            "<out>/sweeps/<name>.db; postgresql://... for many machines)")
        action.add_argument("--out", type=Path, default=Path("reports"),
                            help="reports folder (default: reports)")
    for action in (worker, show):
        action.add_argument("--study", required=True, help="the study's name")
    return parser


def _sweep(args) -> int:
    from lab.sweeps import load_spec, run_sweep, work
    from lab.sweeps.study import default_storage

    if args.action == "worker":  # many per sweep: it imports no plotting
        storage = args.storage or default_storage(args.out, args.study)
        ran = work(storage, args.study, out=args.out, worker=args.worker)
        print(f"worker {args.worker}: ran {ran} trial(s) of {args.study}")
        return 0
    from lab.sweeps import report

    if args.action == "run":
        spec = load_spec(args.spec)
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {args.workers}")
        study = run_sweep(spec, out=args.out, storage=args.storage, workers=args.workers)
        print(report.summary_line(study))
        print(f"report: {report.write(study, args.out)}")
        return 0
    from lab.sweeps.study import load

    study, _ = load(args.storage or default_storage(args.out, args.study), args.study)
    print(report.summary_line(study))
    print(f"report: {report.write(study, args.out)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "sweep":
        try:
            return _sweep(args)
        except ValueError as err:  # SpecError, a storage that cannot be opened, ...
            print(f"error: {err}", file=sys.stderr)
            return 2
    if args.command == "report":
        print(build_index(args.out))
        return 0
    if args.all == (args.notebook is not None):
        parser.error("give either one NOTEBOOK or --all")
    if args.all and args.parameter:
        parser.error("-p applies to one notebook; --all runs every notebook with its defaults")
    if args.force and not args.all:
        parser.error("--force applies to --all; one notebook always runs")
    options = dict(out=args.out, timeout=args.timeout, hide_code=args.hide_code,
                   progress=not args.no_progress)
    try:
        if args.all:
            results = run_all(args.notebooks, force=args.force,
                              log=lambda line: print(line, flush=True), **options)
        else:
            results = [run_notebook(args.notebook, dict(args.parameter), **options)]
    except (ParameterError, RunnerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for r in results:
        reason = f"  ({r.error})" if r.error else ""
        status = "reused" if r.reused else r.status
        print(f"{status:>11}  {r.notebook.name}  {r.report}{reason}")
    print(f"index: {args.out / 'index.html'}; claims: {args.out / 'claims.html'}")
    bad = [r for r in results if r.status != OK]
    if not bad:
        reused = sum(r.reused for r in results)
        print(f"all {len(results)} notebook(s) ok" + (f", {reused} reused" if reused else ""))
        return 0
    print(f"{len(bad)} of {len(results)} notebook(s) did not finish: "
          + ", ".join(f"{r.notebook.name} ({r.status})" for r in bad))
    return 130 if any(r.status == INTERRUPTED for r in bad) else 1
