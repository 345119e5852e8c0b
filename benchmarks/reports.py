"""Where ``make reports``' time goes, and how many notebooks to run at once.

    python benchmarks/reports.py table reports [reports2 ...]   # per-notebook breakdown
    python benchmarks/reports.py jobs 1 2 [--force-again]         # fresh clones, side by side
    python benchmarks/reports.py compiles reports [--top 8]       # what each notebook compiles
    python benchmarks/reports.py twins DUMP [--top 12]            # programs alike but for ...

``table``: for each notebook's latest ``ok`` run in a reports folder (the runs a ``make
reports`` made, not the reused or imported ones), the run's wall time and where it went, from
what the kernel recorded about itself (``lab.runs.kernel``): kernel start and the report
(the runner's share: the run's time less the kernel's), JAX's tracing and lowering, XLA's
compilation, and the kernel's main thread sampled every 20 ms as compiling / inside a native
call (an XLA program, numpy, I/O) / running Python, with the CPU seconds of every thread and
the cores they mean. ``--between START END`` (UTC, as in the run folders' names,
``20261126-0940``) takes the runs started from START up to, not including, END instead of
each notebook's latest (END inclusive once let a re-run started in END's minute replace a
notebook's run of the window: 11 and 12 in the first table of issue 46's section).

``compiles``: for the same runs, the XLA programs each kernel compiled (its record's
``compiled``: name, count, seconds; runs recorded before it have none): how many, their
seconds, and the names compiled more than once, the most seconds first. A name compiled
again is where "compile once" looks: a new ``jit`` wrapper or closure around the same
function, a Python scalar or static argument that differs between calls (a seed, a step
size), or another shape.

``twins``: for an XLA dump of one run (``XLA_FLAGS="--xla_dump_to=DUMP --xla_dump_hlo_as_text"
LAB_COMPILE_CACHE=off python -m lab run NOTEBOOK``), the programs of each name compiled more
than once, split by what tells them apart, from their HLO before optimisation (source
locations and the module's name left out): the *same* program compiled again (a new closure
or ``jit`` wrapper: one compile would do), programs that differ **only in constants** (a
seed, a step size, a discount compiled in: a traced argument would share one program),
programs that differ **only in shapes or integer attributes** (sizes, loop lengths: padding
or a masked length might share one), and programs of another structure. It says where
"compile once" can look, not that a change would keep every bit of a run the same.

``jobs``: clone this repository afresh for each N, each with empty compilation, checkpoint and
data caches (``LAB_COMPILE_CACHE``, ``LAB_CHECKPOINT_DIR``, ``LAB_DATA_DIR`` pointed at new
folders), and time ``make reports JOBS=N`` in each, one after the other on this machine
(nothing else should run beside them); ``--force-again`` then times a second ``make reports
FORCE=1`` in each clone, its compilation cache now warm. Prints each time, the per-notebook
table of each clone and the ratios. ``jobs 1 2`` took 2 h 14 min on the 2-core machine
(2026-11-26: 79.1 and 55.0 min, 0.69x); ``--force-again`` adds about 0.75x of each first run.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _runs(out: Path, between: tuple[str, str] | None = None) -> list[dict]:
    runs = []
    for prov in sorted((out / "runs").glob("*/provenance.json")):
        run = json.loads(prov.read_text())
        stamp = run.get("started", "").replace("-", "").replace(":", "").replace("T", "-")
        if between and not (between[0] <= stamp[:len(between[0])]
                            and stamp[:len(between[1])] < between[1]):
            continue
        if run.get("status") == "ok" and run.get("kernel_time") and \
                not (prov.parent / "imported.json").exists():
            runs.append(run)
    latest = {}
    for run in sorted(runs, key=lambda r: r["started"]):
        latest[run["notebook"]] = run
    return [latest[k] for k in sorted(latest)]


def breakdown(run: dict) -> dict[str, float]:
    """Seconds of one run by where they went (module doc)."""
    t = run["kernel_time"]
    kernel, total = t["wall_s"], run["duration_s"]
    row = {"wall": total, "runner": total - kernel, "trace+lower": t["trace_s"] + t["lower_s"],
           "xla compile": t["xla_compile_s"]}
    sampled = "native_share" in t  # records made before the native/python sampler: none
    row |= {f"main: {k}": kernel * t[f"{k}_share"] if sampled else float("nan")
            for k in ("compile", "native", "python")}
    row |= {"cpu": t["cpu_s"], "cores": t["cpu_s"] / kernel if kernel else 0.0}
    return row


def table(out: Path, between: tuple[str, str] | None = None) -> str:
    rows = [(run["notebook"], breakdown(run)) for run in _runs(out, between)]
    if not rows:
        return f"{out}: no ok run with a kernel time record"
    names = list(rows[0][1])
    lines = [f"| notebook | {' | '.join(names)} |", "|" + " --- |" * (len(names) + 1)]
    totals = {k: sum(r[k] for _, r in rows) for k in names}  # nan where a run has none
    totals["cores"] = totals["cpu"] / max(1e-9, sum(r["wall"] - r["runner"] for _, r in rows))
    for name, row in [*rows, ("all (sum)", totals)]:
        lines.append(f"| {name} | " + " | ".join(
            "-" if row[k] != row[k] else f"{row[k]:.2f}" if k == "cores" else f"{row[k]:.0f}"
            for k in names) + " |")
    return "\n".join(lines)


def compiles(out: Path, between: tuple[str, str] | None = None, top: int = 8) -> str:
    lines = []
    for run in _runs(out, between):
        programs = run.get("compiled")
        if programs is None:
            continue
        total = sum(p["seconds"] for p in programs)
        again = [p for p in programs if p["count"] > 1]
        lines.append(f"### {run['notebook']}: {sum(p['count'] for p in programs)} compilations "
                     f"of {len(programs)} programs, {total:.0f} s; compiled more than once: "
                     f"{len(again)} programs, {sum(p['seconds'] for p in again):.0f} s")
        lines += [f"- {p['name']}: {p['count']}x, {p['seconds']:.1f} s"
                  for p in sorted(programs, key=lambda p: -p["seconds"])[:top]]
    return "\n".join(lines) or f"{out}: no ok run with a record of its compiled programs"


def _hlo_keys(text: str) -> tuple[str, str, str]:
    """Three keys of one HLO module's text, each coarser than the last: the program itself
    (source metadata and the module's own name aside), the program but for its literal
    constants, and the program but for every integer (shapes, sizes, attributes)."""
    import re

    body = text.split("\n", 1)[1] if text.startswith("HloModule") else text
    body = re.sub(r",? ?metadata=\{[^{}]*\}", "", body)
    same = body
    constants = re.sub(r"constant\((?:[^()]|\([^()]*\))*\)", "constant(_)", same)
    integers = re.sub(r"\d+", "N", constants)
    return same, constants, integers


def twins(dump: Path, top: int = 12) -> str:
    """``twins``' table for one XLA dump folder (see the module docstring)."""
    import hashlib
    import re

    by_name: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted(dump.glob("module_*.before_optimizations.txt")):
        name = re.sub(r"^module_\d+\.", "", path.name.removesuffix(".before_optimizations.txt"))
        by_name.setdefault(name, []).append(tuple(
            hashlib.sha1(k.encode()).hexdigest() for k in _hlo_keys(path.read_text())))
    if not by_name:
        return (f"{dump}: no module_*.before_optimizations.txt (an XLA dump made with "
                "--xla_dump_hlo_as_text)")
    rows, totals = [], [0, 0, 0, 0, 0]
    for name, keys in by_name.items():
        same, constants, integers = (len({k[i] for k in keys}) for i in range(3))
        # of the compiles after a name's first: the same program again, one that differs from
        # an earlier one only in constants, only in integers, or in its structure
        split = (len(keys) - 1, len(keys) - same, same - constants, constants - integers,
                 integers - 1)
        totals = [t + x for t, x in zip(totals, (len(keys),) + split[1:], strict=True)]
        if split[0]:
            rows.append((name, len(keys)) + split[1:])
    rows.sort(key=lambda r: (-r[1], r[0]))
    lines = [f"### {dump}: {totals[0]} compiles of {len(by_name)} names; after each name's "
             f"first: {totals[1]} the same program again, {totals[2]} only other constants, "
             f"{totals[3]} only other shapes or integers, {totals[4]} another structure",
             "| program | compiles | the same again | other constants only | other shapes or "
             "integers only | another structure |", "| --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows[:top]]
    return "\n".join(lines)


def _timed(command: list[str], cwd: Path, env: dict, log: Path) -> float:
    start = time.monotonic()
    with log.open("a") as out:
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=out, stderr=subprocess.STDOUT)
    return time.monotonic() - start


def jobs(counts: list[int], force_again: bool) -> None:
    import os

    from lab.runs.benchmarking import cpu_model

    print(f"{os.cpu_count()} cores ({cpu_model()}), commit "
          + subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                           capture_output=True).stdout.strip())
    results = {}
    for n in counts:
        folder = Path(tempfile.mkdtemp(prefix=f"lab-reports-jobs{n}-"))
        subprocess.run(["git", "clone", "-q", str(ROOT), str(folder / "lab")], check=True)
        env = os.environ | {name: str(folder / sub) for name, sub in (
            ("LAB_COMPILE_CACHE", "compile"), ("LAB_CHECKPOINT_DIR", "checkpoints"),
            ("LAB_DATA_DIR", "data"))}
        log = folder / "make-reports.log"
        first = _timed(["make", "reports", f"JOBS={n}"], folder / "lab", env, log)
        print(f"JOBS={n}: fresh clone {first / 60:.1f} min (log: {log})", flush=True)
        results[n] = {"first": first}
        if force_again:
            again = _timed(["make", "reports", f"JOBS={n}", "FORCE=1"], folder / "lab", env, log)
            results[n]["again"] = again
            print(f"JOBS={n}: FORCE=1 again, warm cache {again / 60:.1f} min "
                  f"({again / first:.2f}x the first)", flush=True)
        print(table(folder / "lab" / "reports"), flush=True)
    base = results[counts[0]]["first"]
    for n in counts[1:]:
        print(f"JOBS={n} against JOBS={counts[0]}: {results[n]['first'] / base:.2f}x the time")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("table", help="per-notebook time breakdown of reports folders")
    t.add_argument("folders", nargs="+", type=Path)
    t.add_argument("--between", nargs=2, metavar=("START", "END"))
    j = commands.add_parser("jobs", help="time make reports JOBS=N in fresh clones")
    j.add_argument("counts", nargs="+", type=int)
    j.add_argument("--force-again", action="store_true")
    c = commands.add_parser("compiles", help="the XLA programs each notebook compiled")
    c.add_argument("folders", nargs="+", type=Path)
    c.add_argument("--between", nargs=2, metavar=("START", "END"))
    c.add_argument("--top", type=int, default=8, help="programs listed per notebook")
    w = commands.add_parser("twins", help="programs of one name alike but for constants or shapes")
    w.add_argument("dumps", nargs="+", type=Path)
    w.add_argument("--top", type=int, default=12, help="program names listed per dump")
    args = parser.parse_args(argv)
    if args.command == "twins":
        for dump in args.dumps:
            print(twins(dump, args.top) + "\n")
    elif args.command == "compiles":
        for folder in args.folders:
            print(f"## {folder}\n{compiles(folder, args.between, args.top)}\n")
    elif args.command == "table":
        for folder in args.folders:
            print(f"## {folder}\n{table(folder, args.between)}\n")
    else:
        jobs(args.counts, args.force_again)
    return 0


if __name__ == "__main__":
    sys.exit(main())
