"""benchmarks/reports.py: the --between window (START inclusive, END exclusive, by the
minute) and the programs a notebook compiled more than once."""

import importlib.util
import json

from tests.conftest import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("reports_bench", ROOT / "benchmarks/reports.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_compiles_lists_the_programs_compiled_again_the_most_seconds_first(tmp_path):
    folder = tmp_path / "runs" / "a"
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text(json.dumps({
        "notebook": "12_pixelcnn.ipynb", "status": "ok", "started": "2026-11-27T18:00:00+00:00",
        "duration_s": 10.0, "kernel_time": {"wall_s": 9.0},
        "compiled": [{"name": "jit(step)", "count": 3, "seconds": 6.0},
                     {"name": "jit(eval)", "count": 1, "seconds": 1.5}]}))
    text = _bench().compiles(tmp_path)
    assert "4 compilations of 2 programs, 8 s; compiled more than once: 1 programs, 6 s" in text
    assert text.index("jit(step): 3x, 6.0 s") < text.index("jit(eval): 1x, 1.5 s")


def test_between_takes_runs_started_before_end_not_a_rerun_in_ends_minute(tmp_path):
    bench = _bench()
    for name, started, wall in (("a", "2026-11-26T10:09:09+00:00", 619.0),
                                ("b", "2026-11-26T10:27:58+00:00", 424.0)):
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        (folder / "provenance.json").write_text(json.dumps({
            "notebook": "11_interlocking.ipynb", "status": "ok", "started": started,
            "duration_s": wall, "kernel_time": {"wall_s": wall - 2}}))
    window = bench._runs(tmp_path, ("20261126-0940", "20261126-1027"))
    assert [r["duration_s"] for r in window] == [619.0]  # not the re-run started at 10:27:58
    assert [r["duration_s"] for r in bench._runs(tmp_path)] == [424.0]  # latest by default


def test_twins_tells_a_program_compiled_again_from_one_with_other_constants_or_shapes(tmp_path):
    """Five compiles of jit_step in an XLA dump: the first, the same program from another
    source line, one with another step size, one with another batch size, one that adds."""
    def module(scale="0.001", rows="8", op="multiply", line="7"):
        return (f"HloModule jit_step, entry_computation_layout={{(f32[{rows},4]{{1,0}})}}\n\n"
                f"ENTRY %main.3 (x.1: f32[{rows},4]) -> f32[{rows},4] {{\n"
                f"  %x.1 = f32[{rows},4]{{1,0}} parameter(0)\n"
                f"  %c.2 = f32[] constant({scale})\n"
                f"  %b.3 = f32[{rows},4]{{1,0}} broadcast(f32[] %c.2), dimensions={{}}\n"
                f"  ROOT %m.4 = f32[{rows},4]{{1,0}} {op}(%x.1, %b.3), metadata={{op_name="
                f"\"jit(step)/mul\" source_file=\"a.py\" source_line={line}}}\n}}\n")
    for i, text in enumerate([module(), module(line="9"), module(scale="0.01"),
                              module(rows="16"), module(op="add")]):
        (tmp_path / f"module_{i:04d}.jit_step.before_optimizations.txt").write_text(text)
    (tmp_path / "module_0009.jit_other.before_optimizations.txt").write_text(module())
    text = _bench().twins(tmp_path)
    assert ("6 compiles of 2 names; after each name's first: 1 the same program again, "
            "1 only other constants, 1 only other shapes or integers, 1 another structure"
            ) in text
    assert "| jit_step | 5 | 1 | 1 | 1 | 1 |" in text and "jit_other |" not in text
