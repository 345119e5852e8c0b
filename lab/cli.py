"""``python -m lab``: run notebooks into reports, rebuild the index.

    python -m lab run notebooks/00_quickstart.ipynb -p epochs 2 [--out reports]
    python -m lab run NOTEBOOK -p preset claim -f params.yaml -y "seeds: 5" -r name text
    python -m lab run NOTEBOOK ... --prepare-only   # the prepared notebook; nothing runs
    python -m lab run NOTEBOOK --help-notebook      # its parameters and presets
    python -m lab run NOTEBOOK ... --time-limit 480 # stop in time; then --resume RUN_DIR
    python -m lab run --all [--preset gpu] [--notebooks notebooks] [--force] [--jobs N]
    python -m lab import DIR...                     # run folders made on other machines
    python -m lab report
    python -m lab claims verify reports/runs results    # verdicts recomputed from records
    python -m lab claims rederive results/04_*          # old records under today's rule
    python -m lab --version
    python -m lab runs [--notebook NAME] [--csv]   # the runs as a table
    python -m lab runs diff RUN_A RUN_B            # what differs between two runs
    python -m lab new NAME [--title T] [--paper P] # a new method's family: docs/new-method.md
    python -m lab bundle OUT [--python 3.12] [--platform ...] [--have FREEZE]  # no network
    python -m lab sweep run sweeps/mpo_pendulum.yaml [--workers 4] [--storage URL]
    python -m lab sweep worker --storage URL --study NAME      # join from any machine
    python -m lab sweep report --storage URL --study NAME

The command sits above the packages it dispatches to, ``lab.runs`` and ``lab.sweeps``.
"""

import argparse
import sys
from pathlib import Path

import yaml

import lab
from lab.runs.params import ParameterError, resolve
from lab.runs.provenance import git_state
from lab.runs.report import build_index
from lab.runs.runner import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_JOBS,
    INTERRUPTED,
    OK,
    PRESET_CELL_TIMEOUT,
    RunnerError,
    check_notebook,
    offers,
    reports_folder,
    run_all,
    run_notebook,
    stop_on_signals,
    write_prepared,
)


def _version() -> str:
    import papermill

    git = git_state(Path(lab.__file__).parent)
    commit = f", commit {git['commit'][:8]}{'+dirty' if git['dirty'] else ''}" \
        if git["commit"] else ""
    return f"lab {lab.__version__}{commit} (papermill {papermill.__version__})"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="execute notebooks and write their reports")
    parser.run_parser = run
    run.add_argument("notebook", nargs="?", type=Path, help="the .ipynb file to run")
    run.add_argument("--all", action="store_true", help="run every notebook (with --preset: "
                     "every notebook that has that preset)")
    run.add_argument("--preset", help="with --all: run each notebook that defines this preset "
                     "with it, and list the others as skipped (e.g. --preset gpu)")
    run.add_argument("--notebooks", type=Path, default=Path("notebooks"),
                     help="folder that --all runs (default: notebooks)")
    run.add_argument("--force", action="store_true",
                     help="with --all: run every notebook, even one whose inputs are "
                     "unchanged since its last ok run")
    run.add_argument("--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                     help="with --all: run up to N notebooks at once, each kernel with its "
                     f"share of the cores (default: {DEFAULT_JOBS}; the 2-core machine's "
                     "figures in benchmarks/RESULTS.md)")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="a parameter's value, converted to the "
                     "type of its default (repeatable); beats the preset's and the notebook's")
    run.add_argument("-r", "--parameter-raw", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="a parameter's value as a raw string "
                     "(repeatable)")
    run.add_argument("-f", "--parameters-file", type=Path, metavar="FILE",
                     help="parameters from a YAML file (a mapping of name: value)")
    run.add_argument("-y", "--parameters-yaml", metavar="YAML",
                     help='parameters as a YAML mapping, e.g. "{seeds: 5, lr: 0.1}"')
    run.add_argument("--prepare-only", action="store_true",
                     help="write the prepared notebook and its effective parameters under "
                     "<out>/prepared/ and run nothing")
    run.add_argument("--out", type=Path, default=None,
                     help="reports folder (default: reports; with --resume RUN_DIR, the one "
                     "that holds RUN_DIR)")
    run.add_argument("--timeout", type=int, default=None,
                     help=f"seconds one cell may run (default: {DEFAULT_CELL_TIMEOUT} in a "
                     f"default run, {PRESET_CELL_TIMEOUT} under a named preset)")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help="stop the run before SECONDS, recorded as interrupted with what it "
                     "finished (its checkpoints kept in its folder for --resume)")
    run.add_argument("--resume", nargs="?", const=True, metavar="RUN_DIR",
                     help="run the notebook again in the folder RUN_DIR of its unfinished "
                     "run, with that run's parameters, continuing from its checkpoints; "
                     "with --all (no RUN_DIR): continue each notebook's latest unfinished run")
    run.add_argument("--help-notebook", action="store_true",
                     help="print the notebook's parameters (type, default, what each does), "
                     "its presets and what each changes, and how long its last runs took "
                     "here; run nothing")
    run.add_argument("--hide-code", action="store_true", help="leave code out of the HTML")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    report = commands.add_parser("report", help="rebuild <out>/index.html and "
                                 "<out>/claims.html from the runs")
    report.add_argument("--out", type=Path, default=Path("reports"))
    bring = commands.add_parser("import", help="bring run folders made elsewhere (another "
                                "machine, a lent GPU) into <out>/runs, after checking them")
    bring.add_argument("folders", nargs="+", type=Path, metavar="DIR",
                       help="run folders, each with provenance.json and metrics.json")
    bring.add_argument("--out", type=Path, default=Path("reports"))
    claims = commands.add_parser("claims", help="the claims' verdicts: verify them from the "
                                 "records, or re-derive old records under the shared rule")
    claim_actions = claims.add_subparsers(dest="action", required=True)
    check = claim_actions.add_parser("verify", help="recompute every verdict from each run's "
                                     "metrics.json alone; exit 1 on any mismatch")
    again = claim_actions.add_parser("rederive", help="decide recorded runs' claims again under "
                                     "the experiments' current declarations (no re-run); the "
                                     "claims as recorded are kept in metrics.json")
    for action in (check, again):
        action.add_argument("folders", nargs="+", type=Path, metavar="RUN_OR_RESULTS_DIR",
                            help="run folders, or folders holding them (results, reports)")
    listing = commands.add_parser("runs", help="the runs in a reports folder as a table "
                                  "(lab.runs.table); `runs diff RUN_A RUN_B`: what differs")
    listing.add_argument("--out", type=Path, default=Path("reports"))
    listing.add_argument("--notebook", help="that notebook's runs only (name or stem)")
    listing.add_argument("--csv", action="store_true", help="CSV, one row per run")
    listing_actions = listing.add_subparsers(dest="action")
    compare = listing_actions.add_parser("diff", help="parameters, packages, inputs and "
                                         "metrics that differ between two runs")
    compare.add_argument("first", type=Path, metavar="RUN_A")
    compare.add_argument("second", type=Path, metavar="RUN_B")
    pack = commands.add_parser("bundle", help="wheels, data and a run.sh for a machine "
                               "without network (lab.runs.bundle)")
    pack.add_argument("out", type=Path, metavar="OUT", help="a new folder for the bundle")
    pack.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                      help="the target's Python version (default: this one's)")
    pack.add_argument("--platform", default="manylinux_2_28_x86_64",
                      help="the target's wheel platform tag (default: manylinux_2_28_x86_64)")
    pack.add_argument("--extras", default="", help="the project's extras to include, e.g. "
                      "dmc,atari (default: none)")
    pack.add_argument("--have", type=Path, help="the target's `pip freeze`: leave out what "
                      "it already has at the same version")
    pack.add_argument("--no-data", action="store_true", help="wheels and project only")
    new = commands.add_parser("new", help="a new method's family in every layer, ready to "
                              "run (lab.new.family; guide: docs/new-method.md)")
    new.add_argument("name", metavar="NAME", help="a lowercase identifier, e.g. toy_method")
    new.add_argument("--title", help="the notebook's title (default: from NAME)")
    new.add_argument("--paper", help='"Authors, Title (Venue Year)" (default: a placeholder)')
    new.add_argument("--root", type=Path, default=Path("."),
                     help="the project's root, with lab/ and notebooks/ (default: here)")
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

    if args.action in ("worker", "report") and args.storage is None:
        found = args.out / "sweeps" / f"{args.study}.db"
        if not found.is_file():  # opening it would create an empty one
            raise ValueError(f"no study named {args.study!r} under {args.out} (no {found}); "
                             "give the study's name, its --out, or --storage URL")
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


def _yaml_mapping(text: str, where: str) -> dict:
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise ParameterError(
            f"{where} is not valid YAML ({first}); write name: value lines") from None
    if values is None:
        return {}
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise ParameterError(f"{where} must be a YAML mapping of parameter names to values, "
                             f"got {type(values).__name__}")
    return values


def explicit_values(args) -> tuple[dict, dict]:
    """The explicit values of ``run``, merged as papermill merges them: ``-f`` file, then
    ``-y``, then ``-p``; and the raw ``-r`` strings, which come last."""
    values = {}
    if args.parameters_file is not None:
        try:
            text = args.parameters_file.read_text()
        except OSError as err:
            raise ParameterError(f"cannot read parameters file {args.parameters_file} "
                                 f"({err.strerror}); pass an existing YAML file to -f") from None
        values |= _yaml_mapping(text, f"parameters file {args.parameters_file}")
    if args.parameters_yaml is not None:
        values |= _yaml_mapping(args.parameters_yaml, "-y")
    values |= dict(args.parameter)
    raw = dict(args.parameter_raw)
    return {k: v for k, v in values.items() if k not in raw}, raw


def _show(resolution) -> None:
    """The effective values that differ from the notebook's, with their sources."""
    for name, value in resolution.injected.items():
        print(f"  {name} = {value!r}  ({resolution.sources[name]})")


def _run(parser, args) -> int:
    parser = parser.run_parser  # errors about `run`'s arguments show `run`'s usage
    if args.all == (args.notebook is not None):
        parser.error("give either one NOTEBOOK or --all")
    explicit, raw = explicit_values(args)
    if args.all and (explicit or raw):
        parser.error("-p, -r, -f and -y apply to one notebook; --all runs every notebook "
                     "with its defaults or --preset")
    if args.preset is not None and not args.all:
        parser.error("--preset goes with --all; for one notebook pass -p preset NAME")
    if args.force and not args.all:
        parser.error("--force applies to --all; one notebook always runs")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout is not None and args.timeout < 1:
        raise RunnerError(f"--timeout must be at least 1 second per cell, got {args.timeout}")
    if args.all and args.resume not in (None, True):
        parser.error("--resume with --all takes no RUN_DIR: it continues each notebook's "
                     "latest unfinished run")
    if not args.all and args.resume is True:
        parser.error("--resume needs the RUN_DIR of the run to continue")
    if args.resume is not None and (explicit or raw):
        parser.error("--resume runs with the parameters of the run it continues; leave out "
                     "-p, -r, -f and -y")
    one_resumed = None if args.all else args.resume  # a RUN_DIR: its reports folder
    out = reports_folder(args.out, one_resumed)
    options = dict(out=out, timeout=args.timeout, hide_code=args.hide_code,
                   progress=not args.no_progress)
    stop_on_signals()  # SIGTERM as SIGINT: every running notebook recorded as interrupted
    if args.all:
        if args.preset is not None and not any(
                offers(nb, args.preset) for nb in sorted(args.notebooks.glob("*.ipynb"))):
            raise ParameterError(f"no notebook in {args.notebooks} has a preset "
                                 f"{args.preset!r}; see each notebook's parameters cell")
        results = run_all(args.notebooks, preset=args.preset, force=args.force,
                          prepare_only=args.prepare_only, jobs=args.jobs,
                          time_limit=args.time_limit, resume=args.resume is True,
                          log=lambda line: print(line, flush=True), **options)
        if args.prepare_only:
            return 0
    else:
        check_notebook(args.notebook)  # a .ipynb that exists, before reading it
        if args.help_notebook:
            return _help_notebook(args.notebook, out)
        if args.resume is not None:
            results = [run_notebook(args.notebook, resume=Path(args.resume),
                                    time_limit=args.time_limit, **options)]
            return _summarise(results, out)
        resolution = resolve(args.notebook, explicit, raw=raw)
        if args.prepare_only:
            path = write_prepared(args.notebook, resolution, out)
            print(f"prepared {path} (effective parameters in "
                  f"{path.with_suffix('.parameters.json')}); values not from the notebook:")
            _show(resolution)
            return 0
        results = [run_notebook(args.notebook, resolution=resolution,
                                time_limit=args.time_limit, **options)]
    return _summarise(results, out)


def _help_notebook(notebook: Path, out: Path) -> int:
    """``--help-notebook``: every parameter with its type, default and comment, every preset
    with the values it changes, and the duration of the notebook's last ok run of each preset
    under ``out`` (measured here; none before a first run)."""
    from lab.runs.params import notebook_parameters, notebook_presets
    from lab.runs.report import load_runs

    declared = notebook_parameters(notebook)
    print(f"{notebook.name}: {len(declared)} parameter(s) (name: type = default  # what it "
          "does; -p NAME VALUE sets one)")
    width = max((len(n) for n in declared), default=0)
    for p in declared.values():
        print(f"  {p.name:<{width}}: {p.type_name} = {p.default!r}"
              + (f"  # {p.help}" if p.help else ""))
    presets = notebook_presets(notebook)
    runs = [r for r in (load_runs(out) if (out / "runs").is_dir() else [])
            if r.get("notebook") == notebook.name and r.get("status") == OK]
    print("presets (-p preset NAME; a -p value beats the preset's):")
    for name, values in presets.items():
        took = next((r.get("duration_s") for r in runs if r.get("preset") == name), None)
        changes = ", ".join(f"{k}={v!r}" for k, v in values.items()
                            if k not in declared or v != declared[k].default)
        changes = changes or "the notebook's values"
        time_here = (f"last ok run under {out}: {took / 60:.1f} min" if took is not None
                     else f"no ok run under {out} yet")
        print(f"  {name}: {changes} ({time_here})")
    if not presets:
        print("  none")
    return 0


def _summarise(results: list, out: Path) -> int:
    """Print each run's status and report; the exit status: 0 all ok, 130 one interrupted,
    1 otherwise."""
    for r in results:
        reason = f"  ({r.error})" if r.error else ""
        status = "reused" if r.reused else r.status
        where = r.report if r.report.exists() else "(no run folder)"
        print(f"{status:>11}  {r.notebook.name}  {where}{reason}")
    print(f"index: {out / 'index.html'}; claims: {out / 'claims.html'}")
    bad = [r for r in results if r.status != OK]
    if not bad:
        reused = sum(r.reused for r in results)
        print(f"all {len(results)} notebook(s) ok" + (f", {reused} reused" if reused else ""))
        return 0
    print(f"{len(bad)} of {len(results)} notebook(s) did not finish: "
          + ", ".join(f"{r.notebook.name} ({r.status})" for r in bad))
    return 130 if any(r.status == INTERRUPTED for r in bad) else 1


def _import(args) -> int:
    from lab.runs.imports import import_runs

    imported = import_runs(args.folders, args.out)
    for folder in imported:
        print(f"imported  {folder}")
    print(f"{len(imported)} of {len(args.folders)} run folder(s) imported "
          f"({len(args.folders) - len(imported)} already there); "
          f"claims: {args.out / 'claims.html'}")
    return 0


def _claims(args) -> int:
    from datetime import UTC, datetime

    from lab.runs.rederive import check, rederive, run_folders

    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        raise RunnerError(f"no such folder: {', '.join(missing)}; give run folders or the "
                          "folders that hold them (results, reports)")
    folders = run_folders(args.folders)
    if not folders:
        raise RunnerError("no run folder (with metrics.json) in "
                          f"{', '.join(map(str, args.folders))}")
    if args.action == "rederive":
        project = Path(lab.__file__).resolve().parent.parent
        when = datetime.now(UTC).isoformat(timespec="seconds")
        commit = git_state(project)["commit"] or ""
        for folder in folders:
            before, after = rederive(folder, project, when=when, commit=commit[:12])
            was = dict(before)
            print(f"{folder.name}: " + "; ".join(
                f"{name} {was.get(name, '(new)')} -> {verdict}" for name, verdict in after))
        return 0
    bad = unquoted = 0
    for folder in folders:
        wrong, unquoted_claims = check(folder)
        problems = wrong + unquoted_claims
        bad += bool(problems)
        only_quotes = bool(unquoted_claims) and not wrong
        unquoted += only_quotes
        label = "ok" if not problems else "UNQUOTED" if only_quotes else "MISMATCH"
        print(f"{label:>8}  {folder}")
        for line in problems:
            print(f"          {line}")
    print(f"{len(folders) - bad} of {len(folders)} run(s) reproduce their recorded verdicts"
          + (f"; {unquoted} refused until their claims quote the paper" if unquoted else ""))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version())
        return 0
    if args.command is None:
        parser.error("give a command: run, import, report, runs, claims, new, bundle or "
                     "sweep")
    if args.command == "claims":
        try:
            return _claims(args)
        except (RunnerError, ValueError, OSError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    if args.command == "sweep":
        try:
            return _sweep(args)
        except ValueError as err:  # SpecError, a storage that cannot be opened, ...
            print(f"error: {err}", file=sys.stderr)
            return 2
    if args.command == "report":
        if not args.out.is_dir():
            what = "is a file" if args.out.exists() else "does not exist"
            print(f"error: --out {args.out} {what}; pass the reports folder that holds runs/ "
                  "(default: reports)", file=sys.stderr)
            return 2
        print(build_index(args.out))
        return 0
    if args.command == "runs":
        from lab.runs import table

        try:
            if args.action == "diff":
                print(table.diff_text(args.first, args.second))
                return 0
            if not (args.out / "runs").is_dir():
                raise ValueError(f"no runs under {args.out}; run a notebook first, or pass "
                                 "--out with the reports folder that holds runs/")
            found = table.rows(args.out, args.notebook)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(table.as_csv(found) if args.csv else table.as_text(found), end="" if args.csv
              else "\n")
        return 0
    if args.command == "new":
        from lab.new.family import NewError, new_family

        try:
            written = new_family(args.root, args.name, title=args.title, paper=args.paper)
        except NewError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for path in written:
            print(f"wrote  {path}")
        notebook = next(p for p in written if p.suffix == ".ipynb")
        print(f"next: python -m lab run {notebook.relative_to(args.root)}; then write the "
              f"paper's words in lab/experiments/{args.name}.py (CLAIMS); guide: "
              "docs/new-method.md")
        return 0
    if args.command == "bundle":
        from lab.runs.bundle import bundle

        try:
            bundle(args.out, python=args.python, platform=args.platform,
                   extras=tuple(e for e in args.extras.split(",") if e), have=args.have,
                   data=not args.no_data)
        except RunnerError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    from lab.runs.imports import ImportRefused

    try:
        return _import(args) if args.command == "import" else _run(parser, args)
    except (ParameterError, RunnerError, ImportRefused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
