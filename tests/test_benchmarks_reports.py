"""benchmarks/reports.py's --between window: START inclusive, END exclusive (by the minute)."""

import importlib.util
import json

from tests.conftest import ROOT


def test_between_takes_runs_started_before_end_not_a_rerun_in_ends_minute(tmp_path):
    spec = importlib.util.spec_from_file_location("reports_bench", ROOT / "benchmarks/reports.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
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
