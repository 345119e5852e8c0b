"""``lab.runs.imports``: run folders made elsewhere come into ``reports/runs`` whole,
once, or not at all. The folders are written by hand in tmp_path (no notebook runs)."""

import hashlib
import json

import pytest

from lab.runs.claims import HOLDS
from lab.runs.imports import ImportRefused, import_runs
from tests.test_reports import claim_metrics, write_run

STARTED = "2026-11-30T08:00:00+00:00"


def listing(folder) -> dict[str, str]:
    """Every path under ``folder`` with its content's digest: equal listings, equal trees."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


def gpu_run(folder, **kwargs):
    """A finished run folder as a GPU machine's runner leaves it, figures and notebook too."""
    write_run(None, folder.name, "01_proxprop.ipynb", STARTED, claim_metrics(HOLDS, loss=0.4242),
              folder=folder, devices=["cuda:0 NVIDIA H100 80GB HBM3"], **kwargs)
    (folder / "01_proxprop.ipynb").write_text('{"cells": []}')
    (folder / "figures").mkdir()
    (folder / "figures" / "cell03-0.png").write_bytes(b"\x89PNG not really")
    return folder


def test_import_runs_brings_a_run_in_once(tmp_path):
    out, source = tmp_path / "reports", gpu_run(tmp_path / "gpu" / "01_proxprop-20261130-a1")
    (imported,) = import_runs([source], out)
    assert imported == out / "runs" / source.name
    for name in ("provenance.json", "metrics.json", "report.html", "01_proxprop.ipynb",
                 "figures/cell03-0.png"):
        assert (imported / name).read_bytes() == (source / name).read_bytes(), name
    mark = json.loads((imported / "imported.json").read_text())
    assert mark["imported_from"] == str(source.resolve()) and mark["imported_at"][:2] == "20"
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")]  # no leftovers

    dashboard = (out / "claims.html").read_text()
    assert "0.4242" in dashboard and ">recorded</span>" in dashboard
    assert '<span class="device">NVIDIA H100 80GB HBM3</span>' in dashboard
    assert f'href="runs/{source.name}/report.html"' in (out / "index.html").read_text()

    before = listing(out)
    assert import_runs([source], out) == []  # make reports imports results/ every time
    assert import_runs([source, source], out) == []
    assert listing(out) == before


def missing_metrics(folder, out):
    (folder / "metrics.json").unlink()
    return "no metrics.json"


def malformed_json(folder, out):
    text = (folder / "provenance.json").read_text()
    (folder / "provenance.json").write_text(text[:len(text) // 2])
    return "provenance.json is not valid JSON at line 1"


def still_running(folder, out):
    run = json.loads((folder / "provenance.json").read_text()) | {"status": "running"}
    (folder / "provenance.json").write_text(json.dumps(run))
    return "the run has not finished (status running)"


def name_taken(folder, out):
    other = gpu_run(out.parent / "other" / folder.name, commit="ffffffffffffffff")
    import_runs([other], out)  # the same name, another run (another commit)
    return f"another run is already named {folder.name}"


@pytest.mark.parametrize("breakage", [missing_metrics, malformed_json, still_running, name_taken])
def test_import_refuses_a_broken_folder_and_changes_nothing(tmp_path, breakage):
    out = tmp_path / "reports"
    import_runs([gpu_run(tmp_path / "earlier" / "01_proxprop-20261129-e1")], out)
    good = gpu_run(tmp_path / "gpu" / "01_proxprop-20261130-g1")
    broken = gpu_run(tmp_path / "gpu" / "01_proxprop-20261130-b1")
    problem = breakage(broken, out)
    before = listing(out)
    with pytest.raises(ImportRefused) as refused:
        import_runs([good, broken], out)  # every folder is checked before anything is written
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{broken}: {problem}"), message
    assert message.count(";") >= 1 and len(message.rsplit(";", 1)[1].strip()) > 10  # the fix
    assert listing(out) == before
    assert not (out / "runs" / good.name).exists()


def test_import_refuses_a_record_without_what_the_reports_need(tmp_path):
    out = tmp_path / "reports"
    cases = {"notebook": ("notebook", "run.py"), "started": ("started", "yesterday"),
             "git commit": ("git", {"dirty": False}), "parameters": ("parameters", None)}
    for i, (problem, (key, value)) in enumerate(cases.items()):
        folder = gpu_run(tmp_path / f"run{i}")
        run = json.loads((folder / "provenance.json").read_text()) | {key: value}
        (folder / "provenance.json").write_text(json.dumps(run))
        with pytest.raises(ImportRefused, match=problem):
            import_runs([folder], out)
    folder = gpu_run(tmp_path / "bad-claim")
    metrics = claim_metrics(HOLDS)
    metrics["claims"][0]["verdict"] = "mostly"
    (folder / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(ImportRefused, match="verdict 'mostly', not one of holds"):
        import_runs([folder], out)
    metrics["claims"][0]["verdict"] = "does not hold"  # a verdict its numbers do not give
    (folder / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(ImportRefused, match="do not follow from its numbers by the shared rule "
                       r"\(faster_per_epoch: verdict recorded 'does not hold', recomputed "
                       "'holds'.*claims rederive"):
        import_runs([folder], out)
    assert not out.exists()


def test_a_record_alone_gets_a_page_with_its_claims_and_curves(tmp_path):
    """A record without its notebook (results/'s): the import renders a report from it, with
    the claims' evidence and one small figure per recorded curve, and the dashboard links
    that page; no absolute path of the importing machine is shown."""
    source = tmp_path / "elsewhere" / "01_proxprop-20261130-b2"
    write_run(None, source.name, "01_proxprop.ipynb", STARTED, claim_metrics(HOLDS),
              folder=source)
    (source / "report.html").unlink()
    (imported,) = import_runs([source], tmp_path / "reports")
    page = (imported / "report.html").read_text()
    assert "ProxProp lowers the loss faster per epoch" in page and "rendered from" in page
    assert page.count('src="data:image/png') == 2  # the two curves, ProxProp and BackProp
    dashboard = (tmp_path / "reports" / "claims.html").read_text()
    assert f'href="runs/{source.name}/report.html"' in dashboard
    assert str(tmp_path) not in dashboard and "imported from a folder named " in dashboard
