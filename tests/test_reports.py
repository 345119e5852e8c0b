"""Reports that lead with the claims: the run header, the index, the claims dashboard, and
``make reports`` reusing runs whose inputs are unchanged. The pages are built from
``metrics.json`` files the tests write (no notebook runs), except the reuse tests, which run
tiny notebooks through the runner."""

import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from lab.runs import build_index, run_all
from lab.runs.claims import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    PAIRED,
    SMALLER,
    TOO_SMALL,
    UNTESTED,
    Declaration,
    claims_of,
    headline_of,
    judge,
    summary,
)
from lab.runs.imports import import_runs
from lab.runs.inputs import changed, complete, file_digest, fingerprint, refresh
from lab.runs.report import claim_rows, device_of, export_html, load_runs
from tests.conftest import provenance, run_dirs, write_notebook

CURVE = {"x": list(range(500)), "y": [0.123456789 * i for i in range(500)],
         "xlabel": "epoch", "ylabel": "loss"}


# per-seed values (claimed, baseline) that the shared rule decides as each verdict, with the
# smallest effect that counts 0.5: all five seeds ahead by 1 (p = 1/32), all behind by 1,
# three seeds ahead (p = 1/8 can never reach 0.05), five ahead by 0.1, none measured
SEEDS_FOR = {HOLDS: [1.0] * 5, FAILS: [-1.0] * 5, INCONCLUSIVE: [1.0, 2.0, 3.0],
             SMALLER: [0.1] * 5, UNTESTED: None}


def declared(name: str, statement: str, **changes) -> Declaration:
    return Declaration(**{"name": name, "statement": statement,
                          "quote": "ProxProp ... converges faster than BackProp",
                          "source": "Sec. 4", "unit": "seed", "measure": "loss gain",
                          "comparison": PAIRED, "minimum_effect": 0.5} | changes)


def judged(name: str, statement: str, verdict: str, numbers: dict | None = None,
           **changes) -> dict:
    """A claim entry that the shared rule decides as ``verdict`` (``SEEDS_FOR``)."""
    values = SEEDS_FOR[verdict]
    return judge(declared(name, statement, **changes), values,
                 None if values is None else [0.0] * len(values), numbers=numbers)


def claim_metrics(verdict: str, *, loss: float = 0.25, preset_note: str = "", **changes) -> dict:
    """What a notebook records: numbers, curves, and its declared claims and headline."""
    return {"final_loss": loss, "val_accuracy": 0.91, "losses_by_lr": [0.1] * 200,
            "curves": {"ProxProp": CURVE, "BackProp": CURVE}} | summary(
        paper="Frerix et al., Proximal Backpropagation (ICLR 2018)",
        measured=f"digits, 3 seeds{preset_note}", paper_setting="CIFAR-10",
        claims=[judged("faster_per_epoch", "ProxProp lowers the loss faster per epoch",
                       verdict, {"loss, ProxProp": loss, "BackProp": 0.5,
                                 "epochs lower": "30 of 30"}, **changes),
                judged("stable", "ProxProp trains where BackProp diverges", UNTESTED,
                       {"BackProp diverged at": "[]"})],
        headline=["final_loss", "val_accuracy", "losses_by_lr", "missing"])


def provenance_record(notebook: str, started: str, status: str = "ok",
                      parameters: dict | None = None, overrides: dict | None = None,
                      devices: list[str] = ("cpu:0 cpu",), commit: str = "0123456789abcdef",
                      dirty: bool = False) -> dict:
    return {"notebook": notebook, "notebook_path": f"notebooks/{notebook}",
            "parameters": parameters or {"epochs": 30}, "overrides": overrides or {},
            "seed": 0, "git": {"commit": commit, "dirty": dirty},
            "versions": {"python": "3.11", "jax": "0.4"}, "jax_devices": list(devices),
            "xla_flags": "", "host": "testhost", "platform": "Linux", "run_dir": "",
            "status": status, "started": started, "ended": started, "duration_s": 12.5,
            "error": None if status == "ok" else "ValueError: boom", "figures": []}


def write_run(out, name: str, notebook: str, started: str, metrics: dict, *, folder=None,
              **kwargs):
    """A run folder as the runner leaves it: under ``out/runs``, or at ``folder``."""
    folder = folder or out / "runs" / name
    folder.mkdir(parents=True)
    run = provenance_record(notebook, started, **kwargs) | {"run_dir": str(folder)}
    (folder / "provenance.json").write_text(json.dumps(run))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "report.html").write_text("<html>report</html>")
    return folder


def render_header(tmp_path, metrics: dict, status: str = "ok", **record) -> str:
    """The run report's header, as ``export_html`` writes it above the notebook."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# body")])
    run = provenance_record("01_proxprop.ipynb", "2026-11-23T10:00:00+00:00", status) | record
    path = export_html(nb, run | {"metrics": metrics}, tmp_path / "report.html")
    html = path.read_text()
    return html[html.index('<header class="lab-run">'):html.index("</header>")]


def test_verdicts_and_summary_are_checked():
    assert [claims_of(claim_metrics(v))[0]["verdict"] for v in SEEDS_FOR] == list(SEEDS_FOR)
    with pytest.raises(ValueError, match="comparison 'mostly' is not one of"):
        declared("x", "a claim", comparison="mostly")
    with pytest.raises(ValueError, match="declare the paper's words"):
        declared("x", "a claim", quote=" ")
    with pytest.raises(ValueError, match="claim names repeat"):
        summary(paper="p", measured="m", claims=[judged("x", "a", HOLDS),
                                                 judged("x", "b", FAILS)])


def test_headline_keeps_declared_scalars_only():
    m = claim_metrics(HOLDS)
    assert headline_of(m) == {"final_loss": 0.25, "val_accuracy": 0.91}  # no list, no missing
    assert [c["verdict"] for c in claims_of(m)] == [HOLDS, UNTESTED]
    assert claims_of({"final_loss": 1.0}) == [] and headline_of({}) == {}


def test_run_header_leads_with_claims_and_prints_no_array(tmp_path):
    head = render_header(tmp_path, claim_metrics(INCONCLUSIVE))
    assert len(head) < 9000, len(head)  # the old header printed every number: ~3,000 chars
    assert not re.search(r"(\d[\d.e+-]*,\s*){10}", head), "an array was printed inline"
    assert "ProxProp lowers the loss faster per epoch" in head and "v-inconclusive" in head
    assert "“ProxProp ... converges faster than BackProp” <span class=\"muted\">(Sec. 4)" in head
    assert "effect +2 [1, 3] (95% CI), n = 3 (unit: seed), p = 0.125" in head
    assert "v-not-tested" in head and "Proximal Backpropagation" in head
    assert head.index("ProxProp lowers") < head.index("final_loss") < head.index("parameters")
    assert "final loss <b>0.25</b>" in head and "0.91" in head  # labelled, 4 digits
    labelled = claim_metrics(HOLDS) | {"headline_labels": {"final_loss": "loss at the end"}}
    assert "loss at the end <b>0.25</b>" in render_header(tmp_path, labelled)
    assert "losses_by_lr" not in head.split("metrics.json")[0].split("parameters")[0]
    assert re.search(r'\d+ more recorded values .*href="metrics.json"', head, re.S)
    assert "commit 0123456789" in head and "cpu:0 cpu" in head and "12.5 s" in head


def test_the_papers_own_number_stands_beside_ours_in_the_report_and_on_the_dashboard(tmp_path):
    """A claim that records the paper's number shows it in the run's report; the dashboard
    shows it from whichever run recorded it (runs recorded before the field have none), and
    a claim without one says the paper's text gives none."""
    given = "a 2x speed-up (Table 1)"
    head = render_header(tmp_path, claim_metrics(HOLDS, paper_value=given))
    assert f"the paper reports: <b>{given}</b>" in head
    assert "the paper's own number: none" in render_header(tmp_path, claim_metrics(HOLDS))
    out = tmp_path / "reports"
    write_run(out, "old", "01_proxprop.ipynb", "2026-11-20T10:00:00+00:00",
              claim_metrics(HOLDS, paper_value=given))
    newer = claim_metrics(FAILS)
    for claim in newer["claims"]:
        claim.pop("paper_value")  # recorded before the field existed
    write_run(out, "new", "01_proxprop.ipynb", "2026-11-21T10:00:00+00:00", newer)
    build_index(out)
    rows = {r["claim"]["name"]: r for r in claim_rows(load_runs(out))}
    assert rows["faster_per_epoch"]["paper_value"] == given
    assert rows["stable"]["paper_value"] == ""
    dashboard = (out / "claims.html").read_text()
    assert dashboard.count(f"the paper reports: <b>{given}</b>") == 1


def test_the_dashboard_links_each_papers_page(tmp_path, monkeypatch):
    """A notebook whose family has docs/papers/<name>.md gets a link to it in the paper
    column, relative to the reports folder; one without a page gets none."""
    from lab.runs import report

    papers = tmp_path / "docs" / "papers"
    papers.mkdir(parents=True)
    (papers / "proxprop.md").write_text("# ProxProp")
    monkeypatch.setattr(report, "PAPERS", papers)
    out = tmp_path / "reports"
    write_run(out, "01", "01_proxprop.ipynb", "2026-11-20T10:00:00+00:00", claim_metrics(HOLDS))
    write_run(out, "09", "09_other.ipynb", "2026-11-20T10:00:00+00:00", claim_metrics(HOLDS))
    build_index(out)
    dashboard = (out / "claims.html").read_text()
    assert dashboard.count("the paper's page</a>") == 1
    assert 'href="../docs/papers/proxprop.md"' in dashboard


def test_run_without_claims_renders(tmp_path):
    head = render_header(tmp_path, {"test_accuracy": 0.97, "curve": list(range(100))})
    assert "declares no claims" in head and "<table class=\"claims\">" not in head
    assert not re.search(r"(\d+,\s*){10}", head)
    failed = render_header(tmp_path, {}, status="failed")
    assert "ValueError: boom" in failed and "status-failed" in failed


def test_index_and_dashboard_show_the_latest_verdicts(tmp_path):
    out = tmp_path / "reports"
    write_run(out, "01-old", "01_proxprop.ipynb", "2026-11-20T10:00:00+00:00",
              claim_metrics(HOLDS, loss=0.111))
    write_run(out, "01-new", "01_proxprop.ipynb", "2026-11-21T10:00:00+00:00",
              claim_metrics(FAILS, loss=0.222))
    write_run(out, "01-failed", "01_proxprop.ipynb", "2026-11-22T10:00:00+00:00", {},
              status="failed")
    write_run(out, "01-claim", "01_proxprop.ipynb", "2026-11-19T10:00:00+00:00",
              claim_metrics(INCONCLUSIVE, loss=0.333, preset_note=", claim preset"),
              parameters={"preset": "claim", "epochs": 30}, overrides={"preset": "claim"})
    write_run(out, "00-run", "00_quickstart.ipynb", "2026-11-18T10:00:00+00:00",
              {"test_accuracy": 0.95, "headline": ["test_accuracy"],
               "study": {"paper": "", "measured": "digits"}, "claims": []})
    build_index(out)

    rows = claim_rows(load_runs(out))
    got = [(r["notebook"], r["claim"] and r["claim"]["name"],
            [(c["label"], c["verdict"], c["run"]["folder"].rsplit("/", 1)[1])
             for c in r["cells"]]) for r in rows]
    assert got == [("00_quickstart.ipynb", None, [("default", None, "00-run")]),
                   ("01_proxprop.ipynb", "faster_per_epoch",  # the newest ok run, not older
                    [("default", FAILS, "01-new"), ("preset claim", INCONCLUSIVE, "01-claim")]),
                   ("01_proxprop.ipynb", "stable",
                    [("default", UNTESTED, "01-new"), ("preset claim", UNTESTED, "01-claim")])]
    assert [r["counted"]["label"] for r in rows[1:]] == ["preset claim", "preset claim"]

    dashboard = (out / "claims.html").read_text()
    assert dashboard.count('<tr data-notebook="01_proxprop.ipynb"') == 2
    latest = re.sub(r"<details.*?</details>", "", dashboard, flags=re.S)  # history collapsed
    assert "0.222" in latest and "0.333" in latest and "0.111" not in latest
    assert "0.111" in dashboard  # the older run, in the claim's history
    assert "digits, 3 seeds, claim preset" in dashboard and "paper: CIFAR-10" in dashboard
    assert "no claims declared (not a paper)" in dashboard
    assert 'href="runs/01-new/report.html"' in dashboard
    # counted at the claim preset: inconclusive and not tested, not the default's "does not
    # hold"; the retired word is nowhere
    assert ">1 inconclusive<" in dashboard and ">0 does not hold<" in dashboard
    assert "weakly" not in dashboard
    assert ">1 not tested<" in dashboard
    assert "0 at a GPU run, 2 at another preset on CPU, 0 at the default run" in dashboard
    assert "recorded</span>" not in dashboard.split("</p>", 1)[1]  # nothing was imported

    index = (out / "index.html").read_text()
    assert 'href="claims.html"' in index
    assert index.count('<tr data-notebook=') == 5
    assert index.index("01-failed") < index.index("01-new") < index.index("01-old")  # newest first
    assert "v-does-not-hold" in index and "v-holds" in index and "v-inconclusive" in index
    assert "✗ faster_per_epoch" in index and "none declared" in index
    assert "final loss <b>0.222</b>" in index and "test accuracy <b>0.95</b>" in index
    assert 'title="final_loss in metrics.json"' in index  # the label, its key on hover
    assert not re.search(r"(\d[\d.]*,\s*){10}", index)
    for option in ("00_quickstart.ipynb", "01_proxprop.ipynb", "failed", "ok"):
        assert f"<option>{option}</option>" in index


def test_below_the_declared_budget_is_too_small():
    def solves(budget, values=(-900.0, -950.0, -880.0, -910.0, -930.0), **changes):
        declaration = declared("mpo_solves", "MPO solves the task", comparison="threshold",
                               threshold=-200.0, minimum_effect=0.0, decidable_at=11_000,
                               budget_unit="environment steps")
        return claims_of(summary(paper="p", measured="m", claims=[
            judge(declaration, values, budget=budget)]))[0]

    short = solves(3_000)
    assert (short["verdict"], short["measured_verdict"]) == (TOO_SMALL, FAILS)
    assert solves(11_000)["verdict"] == FAILS  # at the budget, the measured verdict
    assert solves(10_999, values=[-100.0] * 5)["measured_verdict"] == HOLDS
    assert solves(3_000, values=None)["verdict"] == UNTESTED  # nothing measured: not tested
    from lab.runs.claims import evidence

    assert evidence(short).endswith("measured does not hold below the smallest budget "
                                    "(3,000 of 11,000 environment steps)")


def test_sweeps_claim_is_paired_per_sampler_seed_with_its_margin():
    from types import SimpleNamespace

    from lab.experiments import sweeps

    spec = SimpleNamespace(metric="mpo_final_return", trials=8, phases=3, survival=0.5,
                           direction="maximize", notebook="04_policy_improvement.ipynb",
                           fixed={"total_steps": 4_500})

    def run(pairs):
        rows = [{"hypertrick_best": h, "random_best": r} for h, r in pairs]
        return {"comparisons": rows, "seeds_hypertrick_at_least_as_good": 0,
                "seeds": len(rows), "mean_hypertrick_best": 0.0, "mean_random_best": 0.0,
                "mean_hypertrick_compute": 4.0, "mean_random_compute": 4.0}

    tie = run([(-999.0, -999.0)])
    (claim,) = sweeps.summary(tie, spec)["claims"]  # one seed, below 6,000 steps
    assert claim["verdict"] == TOO_SMALL and claim["measured_verdict"] == INCONCLUSIVE
    spec.fixed["total_steps"] = 6_000
    # within the margin of 25 on five seeds: holds; 30 behind on every seed: does not hold
    close = run([(-200.0, -195.0)] * 5)
    assert sweeps.summary(close, spec)["claims"][0]["verdict"] == HOLDS
    assert sweeps.summary(run([(-230.0, -200.0)] * 5), spec)["claims"][0]["verdict"] == FAILS
    # a metric to minimise flips the direction and the margin
    spec.direction = "minimize"
    assert sweeps.summary(run([(0.30, 0.25)] * 5), spec)["claims"][0]["verdict"] == HOLDS
    assert sweeps.summary(run([(40.0, 10.0)] * 5), spec)["claims"][0]["verdict"] == FAILS


def test_device_of_names_accelerators():
    assert device_of({"jax_devices": ["cpu:0 cpu"]}) == ("cpu", False)
    assert device_of({"jax_devices": [f"cpu:{i} cpu" for i in range(8)]}) == ("8 x cpu", False)
    assert device_of({"jax_devices": ["cuda:0 NVIDIA H100 80GB HBM3"]}) == \
        ("NVIDIA H100 80GB HBM3", True)
    assert device_of({"jax_devices": ["tpu:0 TPU v4", "tpu:1 TPU v4"]}) == ("2 x TPU v4", True)
    assert device_of({}) == ("unknown device", False)


def test_dashboard_shows_each_scale_side_by_side_and_counts_the_largest(tmp_path):
    """A default run too small to decide, a recorded claim-preset run and a GPU run, both
    imported: one row with the three cells, smallest scale first; the headline counts take
    the GPU run's verdict and say so."""
    out, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    study = {"paper": "Abdolmaleki et al. 2018 (MPO)", "measured": "Pendulum-v1"}

    def metrics(verdict, budget):
        solves = declared("mpo_solves", "MPO solves the task", decidable_at=11_000,
                          budget_unit="environment steps")
        return summary(claims=[judge(solves, SEEDS_FOR[verdict], [0.0] * 5, budget=budget,
                                     numbers={"final return": -900.0})], **study)

    write_run(out, "04-default", "04_policy_improvement.ipynb", "2026-12-03T09:00:00+00:00",
              metrics(FAILS, 3_000), parameters={"preset": "default", "total_steps": 3_000})
    write_run(out, "04-claim", "04_policy_improvement.ipynb", "2026-11-22T10:00:00+00:00",
              metrics(HOLDS, 20_000),
              folder=elsewhere / "04-claim", commit="aaaabbbbccccdddd",
              parameters={"preset": "claim", "total_steps": 20_000},
              overrides={"preset": "claim"})
    write_run(out, "04-gpu", "04_policy_improvement.ipynb", "2026-11-30T08:00:00+00:00",
              metrics(SMALLER, 100_000),
              folder=elsewhere / "04-gpu", commit="eeeeffff00001111", dirty=True,
              devices=["cuda:0 NVIDIA H100 80GB HBM3"],
              parameters={"preset": "dmc_cartpole", "total_steps": 100_000})
    (elsewhere / "04-claim" / "report.html").unlink()  # records only, as in results/
    assert [p.name for p in import_runs([elsewhere / "04-claim", elsewhere / "04-gpu"], out)] \
        == ["04-claim", "04-gpu"]

    (row,) = claim_rows(load_runs(out))
    assert [(c["label"], c["verdict"], c["recorded"]) for c in row["cells"]] == [
        ("default", TOO_SMALL, False), ("preset claim", HOLDS, True),
        ("NVIDIA H100 80GB HBM3, preset dmc_cartpole", SMALLER, True)]
    assert row["counted"] is row["cells"][2]

    page = (out / "claims.html").read_text()
    (tr,) = re.findall(r'<tr data-notebook="04_policy_improvement.ipynb".*?</tr>', page, re.S)
    cells = re.findall(r'<div class="scale[^"]*" data-scale="([^"]*)">(.*?)\n      </div>', tr,
                       re.S)
    assert [label for label, _ in cells] == ["default", "preset claim",
                                             "NVIDIA H100 80GB HBM3, preset dmc_cartpole"]
    default, claim, gpu = (body for _, body in cells)
    assert "too small to decide here</span>" in default and "recorded" not in default
    assert "measured does not hold below the smallest budget (3,000 of 11,000 environment " \
        "steps)" in default
    assert '<span class="date">2026-12-03</span>' in default
    assert '<span class="device">cpu</span>' in default and ">01234567<" in default
    assert ">holds</span>" in claim and ">recorded</span>" in claim
    assert '<span class="date">2026-11-22</span>' in claim and ">aaaabbbb<" in claim
    assert 'href="runs/04-claim/report.html"' in claim  # rendered from its record
    assert ">smaller than claimed</span>" in gpu and ">recorded</span>" in gpu
    assert 'href="runs/04-gpu/report.html"' in gpu
    assert '<span class="device">NVIDIA H100 80GB HBM3</span>' in gpu
    assert '<span class="date">2026-11-30</span>' in gpu and ">eeeeffff+dirty<" in gpu
    assert "counted</span>" in gpu and "counted</span>" not in default + claim
    # the headline counts take the GPU verdict, once, and say so
    assert ">1 smaller than claimed<" in page and ">0 holds<" in page
    assert ">0 too small to decide here<" in page
    assert "1 at a GPU run, 0 at another preset on CPU, 0 at the default run" in page

    index = (out / "index.html").read_text()
    table = index.split('<table id="runs">')[1]
    assert table.count(">recorded</span>") == 2 and "NVIDIA H100 80GB HBM3" in table
    assert "… mpo_solves" in index


def test_run_header_names_where_each_changed_parameter_came_from(tmp_path):
    sources = {"epochs": "preset claim", "lr": "explicit", "preset": "explicit",
               "seed": "default"}
    head = render_header(tmp_path, {}, preset="claim", parameter_sources=sources,
                         parameters={"preset": "claim", "epochs": 90, "lr": 0.5, "seed": 0})
    changed = head[head.index("differs from the notebook"):head.index("<b>parameters</b>")]
    assert re.search(r"epochs=90</code> <span class=\"muted\">\(preset claim\)", changed)
    assert re.search(r"lr=0.5</code> <span class=\"muted\">\(explicit\)", changed)
    assert "seed" not in changed
    older = render_header(tmp_path, {}, overrides={"epochs": 5})  # no parameter_sources
    changed = older[older.index("differs from the notebook"):older.index("<b>parameters</b>")]
    assert re.search(r"epochs=5</code> <span class=\"muted\">\(explicit\)", changed)
    plain = render_header(tmp_path, {})
    assert "nothing: the notebook's own values" in plain


def test_fingerprint_names_what_changed(tmp_path):
    nb = write_notebook(tmp_path / "a.ipynb", "x = 1", "print(x)")
    module, data = tmp_path / "m.py", tmp_path / "table.csv"
    module.write_text("a = 1\n")
    data.write_text("1,2\n")
    used = {"modules": {str(module): file_digest(module)}, "data": {str(data): file_digest(data)}}
    first = complete(fingerprint(nb, {"x": 1}, dependencies="d"), used)
    assert first["files"] == used and {"modules", "data", "digest"} <= set(first)

    def now(parameters=None, dependencies="d"):
        return complete(fingerprint(nb, parameters or {"x": 1}, dependencies=dependencies),
                        refresh(first))

    assert now() == first
    assert changed(first, now({"x": 2})) == ["parameters"]
    assert changed(first, now(dependencies="d2")) == ["dependencies"]
    source = nb.read_text()
    nb.write_text(source.replace("print(x)", "print(x + 1)"))
    assert changed(first, now()) == ["notebook"]
    nb.write_text(source)
    module.write_text("a = 2\n")
    data.write_text("1,3\n")
    assert changed(first, now()) == [str(module), str(data)]
    data.unlink()
    assert changed(first, now())[-1] == f"{data} (gone)"
    # what a compare view reads and the recorder's own modules are not inputs, also in a
    # record made before that rule
    record = tmp_path / "reports" / "runs" / "b-1" / "metrics.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    older = dict(first, files={"modules": {"lab/runs/kernel.py": "k" * 64},
                               "data": {str(record): file_digest(record)}})
    assert complete(fingerprint(nb, {"x": 1}, dependencies="d"), older["files"])["files"] == \
        {"modules": {}, "data": {}}
    record.write_text('{"x": 1}')
    assert changed(older, complete(fingerprint(nb, {"x": 1}, dependencies="d"),
                                   refresh(older))) == []
    # a run that recorded no modules (it failed, or an older record) is never reused
    assert "digest" not in complete(fingerprint(nb, {"x": 1}, dependencies="d"), None)
    assert changed({"notebook": "n"}, first) == ["no record of the modules and data it used"]
    assert changed(None, first) == ["no record of the inputs"]


@pytest.mark.slow
def test_make_reports_reruns_only_the_notebooks_whose_modules_or_data_changed(
        tmp_path, monkeypatch):
    """Two notebooks, each importing a module of its own (and one reading a data file), run
    two at a time: an edit to one module re-runs only the notebook that imported it; so does
    an edit to the data file; an unchanged one is reused. The kernels' compiled programs
    land in the compilation cache given."""
    folder, out, pkg = tmp_path / "notebooks", tmp_path / "reports", tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod_a.py").write_text("A = 1\n")
    (pkg / "mod_b.py").write_text("B = 1\n")
    table = tmp_path / "table.txt"
    table.write_text("7\n")
    monkeypatch.setenv("PYTHONPATH", str(pkg))  # the kernels import them
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("LAB_COMPILE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    write_notebook(folder / "a.ipynb", "x = 1",
                       f"import mod_a\nfrom lab.experiments import record\n"
                       f"record(a=mod_a.A, n=int(open({str(table)!r}).read()))")
    write_notebook(folder / "b.ipynb", "x = 1",
                   "import jax, mod_b\nfrom lab.experiments import record\n"
                   "record(b=mod_b.B, y=float(jax.jit(lambda v: v * 2)(3.0)))")

    def make_reports(**options):
        lines = []
        results = run_all(folder, out=out, progress=False, log=lines.append, jobs=2,
                          **options)
        ran = sorted(r.notebook.name for r in results if not r.reused)
        assert all(r.status == "ok" for r in results), lines
        return ran, lines

    ran, lines = make_reports()
    assert ran == ["a.ipynb", "b.ipynb"]
    assert any("running (changed: no record of the inputs)" in line for line in lines)
    assert lines[-1].startswith("done in ") and lines[-1].endswith("2 notebook(s), 0 reused")
    first_a = next(d for d in run_dirs(out) if d.name.startswith("a-"))
    inputs = provenance(first_a)["inputs"]
    assert str(pkg / "mod_a.py") in inputs["files"]["modules"]
    assert "lab/runs/records.py" in inputs["files"]["modules"]
    assert not any("mod_b" in m for m in inputs["files"]["modules"])
    assert list(inputs["files"]["data"]) == [str(table)]
    b_run = provenance(next(d for d in run_dirs(out) if d.name.startswith("b-")))
    assert b_run["kernel_environment"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert b_run["kernel_time"]["compiles"] >= 1
    assert sum(p["count"] for p in b_run["compiled"]) == b_run["kernel_time"]["compiles"]
    assert any(p["name"].startswith("jit(") for p in b_run["compiled"])  # by program name
    assert list((tmp_path / "cache").glob("*/jit__lambda*"))  # the compilation cache

    assert make_reports()[0] == []  # nothing changed: both reused
    assert json.loads((out / "reused.json").read_text())["a.ipynb"]["run"] == first_a.name
    assert "reused 20" in (out / "index.html").read_text()
    (pkg / "mod_a.py").write_text("A = 2\n")
    ran, lines = make_reports()
    assert ran == ["a.ipynb"] and any(f"changed: {pkg / 'mod_a.py'}" in line for line in lines)
    (pkg / "mod_b.py").write_text("B = 2\n")
    table.write_text("8\n")  # read by a alone
    ran, lines = make_reports()
    assert ran == ["a.ipynb", "b.ipynb"]
    assert any("a.ipynb, " in line and f"changed: {table})" in line for line in lines)
    assert any("b.ipynb, " in line and f"changed: {pkg / 'mod_b.py'})" in line
               for line in lines)
    assert "a.ipynb" not in json.loads((out / "reused.json").read_text())
    assert len(run_dirs(out)) == 5


def test_kernels_side_by_side_share_the_cores_and_key_their_compilation_cache(monkeypatch,
                                                                               tmp_path):
    from lab.runs.runner import SINGLE_THREAD_XLA, compile_cache_dir, kernel_environment

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("LAB_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    two = kernel_environment(jobs=2, cores=2)
    assert two["OMP_NUM_THREADS"] == two["OPENBLAS_NUM_THREADS"] == "1"
    assert two["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=8 {SINGLE_THREAD_XLA}"
    assert two["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"  # a GPU shared by kernels
    wide = kernel_environment(jobs=2, cores=16)
    assert wide["OMP_NUM_THREADS"] == "8" and "XLA_FLAGS" not in wide  # pinned instead
    alone = kernel_environment(jobs=1, cores=2)
    assert "OMP_NUM_THREADS" not in alone and "XLA_PYTHON_CLIENT_PREALLOCATE" not in alone
    # one cache folder per jax, jaxlib, machine, XLA_FLAGS and JAX_* setting
    assert Path(alone["JAX_COMPILATION_CACHE_DIR"]).parent == tmp_path
    assert alone["JAX_COMPILATION_CACHE_DIR"] != two["JAX_COMPILATION_CACHE_DIR"]
    assert compile_cache_dir("") != compile_cache_dir("--xla_cpu_use_fusion_emitters=false")
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    assert kernel_environment(jobs=1)["JAX_COMPILATION_CACHE_DIR"] != \
        alone["JAX_COMPILATION_CACHE_DIR"]
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/yours")
    assert "JAX_COMPILATION_CACHE_DIR" not in kernel_environment(jobs=1)  # yours is kept
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("LAB_COMPILE_CACHE", "off")
    assert "JAX_COMPILATION_CACHE_DIR" not in kernel_environment(jobs=1)


def test_the_kernel_sampler_tells_compiling_native_calls_and_python_apart():
    import sys

    import jax

    from lab.runs.kernel import classify

    seen = []

    def traced(x):
        seen.append(classify(sys._getframe(), None)[0])  # runs while jax traces it
        return x + 1

    jax.jit(traced)(1.0)
    assert seen == ["compile"]
    caller = sys._getframe(1)  # suspended in its call of this test, as a thread in C is
    kind, here = classify(caller, None)
    assert kind == "python"  # a first look
    assert classify(caller, here)[0] == "native"  # still at the same instruction
    assert classify(sys._getframe(), here)[0] == "python"  # a frame that moved on


def test_a_sweeps_trials_add_their_modules_data_and_notebook_to_the_run(tmp_path):
    """Notebook 05's kernel starts runs of another notebook (its trials, in its run folder):
    their modules, data files and notebook are inputs of the sweep's run too."""
    from lab.runs.kernel import used

    trial = tmp_path / "sweeps" / "study" / "runs" / "07_a2c-1"
    trial.mkdir(parents=True)
    (trial / "provenance.json").write_text(json.dumps({
        "notebook_path": "notebooks/07_a2c.ipynb",
        "inputs": {"notebook": "n" * 64, "files": {"modules": {"lab/train/a2c.py": "m" * 64},
                                                   "data": {"/data/table.csv": "d" * 64}}}}))
    record = used(tmp_path)
    assert record["modules"]["lab/train/a2c.py"] == "m" * 64
    assert record["data"]["/data/table.csv"] == "d" * 64
    assert record["data"]["notebooks/07_a2c.ipynb"] == "n" * 64
    assert "lab/runs/kernel.py" in record["modules"]  # this process's own


def test_notebooks_that_time_their_claims_run_alone():
    from lab.runs.runner import next_to_start, times_its_claims
    from tests.conftest import ROOT

    a, b, t, u = (Path(f"{x}.ipynb") for x in "abtu")
    alone = {t, u}
    assert next_to_start([t, a, b], [], alone) == 0  # nothing runs: the first, even timed
    assert next_to_start([t, a, b], [a], alone) == 1  # beside a: not t, the next that can
    assert next_to_start([t, u], [a], alone) is None  # only timed ones left: wait for a
    assert next_to_start([a, b], [t], alone) is None  # nothing beside a timed one
    assert next_to_start([], [], alone) is None
    assert not times_its_claims(ROOT / "notebooks" / "00_quickstart.ipynb")  # no claims
    assert times_its_claims(ROOT / "notebooks" / "13_parallel_wavenet.ipynb")  # samplers timed


def test_runs_table_and_diff_read_the_records(tmp_path, capsys):
    """`lab runs` lists each run with what it changed and its headline; `--csv` one row per
    run; `runs diff` names every parameter, package and metric that differs."""
    from lab.cli import main
    from lab.runs import table

    out = tmp_path / "reports"
    a = write_run(out, "nb-a", "nb.ipynb", "2026-11-20T10:00:00", claim_metrics(HOLDS),
                  parameters={"epochs": 30, "lr": 0.1})
    b = write_run(out, "nb-b", "nb.ipynb", "2026-11-21T10:00:00",
                  claim_metrics(HOLDS, loss=0.5), parameters={"epochs": 60, "lr": 0.1})
    record = json.loads((b / "provenance.json").read_text())
    record |= {"parameter_sources": {"epochs": "explicit", "lr": "default"},
               "versions": {"python": "3.11", "jax": "0.5"}}
    (b / "provenance.json").write_text(json.dumps(record))
    found = table.rows(out)
    assert [r["run"] for r in found] == ["nb-b", "nb-a"]  # newest first
    assert found[0]["changed"] == "epochs=60" and found[1]["changed"] == ""
    assert found[0]["final_loss"] == "0.5" and found[0]["minutes"] == 0.2
    assert main(["runs", "--out", str(out), "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("run,notebook,status,preset,device")
    assert main(["runs", "--out", str(out), "--notebook", "other"]) == 0
    assert capsys.readouterr().out.strip() == ""
    assert main(["runs", "diff", str(a), str(b)]) == 0
    shown = capsys.readouterr().out
    assert "  epochs: 30 -> 60" in shown and "  jax: '0.4' -> '0.5'" in shown
    assert "  final_loss: 0.25 -> 0.5" in shown and "lr:" not in shown
    assert main(["runs", "--out", str(tmp_path / "none")]) == 2
    assert "no runs under" in capsys.readouterr().err


def test_the_dependencies_are_read_again_only_after_an_install(tmp_path, monkeypatch):
    import sys

    from lab.runs import inputs

    reads = []
    monkeypatch.setattr(inputs, "dependency_versions", lambda: reads.append(1) or ["a==1"])
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    inputs._digests.clear()
    first = inputs.dependencies_digest()
    assert inputs.dependencies_digest() == first and len(reads) == 1  # nothing installed
    (tmp_path / "b-2.dist-info").mkdir()  # an install writes into a folder on sys.path
    os.utime(tmp_path, ns=(1, 1))  # a changed mtime, whatever the filesystem's resolution
    inputs.dependencies_digest()
    assert len(reads) == 2
