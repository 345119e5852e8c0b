"""Each claim's history on the claims dashboard, and the index's link from a notebook's latest
report to the run ``make reports`` reused. Run folders are written by hand (no kernel)."""

import json
import re

from lab.runs import build_index
from lab.runs.claims import FAILS, HOLDS, INCONCLUSIVE, UNTESTED
from lab.runs.report import Scale, claim_history, claim_rows, latest_reports, load_runs, reuses
from tests.test_reports import claim_metrics, write_run

NOTEBOOK = "01_proxprop.ipynb"
CLAIM = {"preset": "claim", "epochs": 30}
DEFAULT, CLAIM_CPU = Scale(0, "default", "cpu"), Scale(1, "claim", "cpu")
H100 = "NVIDIA H100 80GB HBM3"


def history_runs(out):
    """Default runs that hold, hold, then fail (the newest ok one), a failed run after them
    that would hold, claim-preset runs between them that are inconclusive, and a GPU run of the
    claim preset that fails; each with its own commit."""
    day = "2026-11-{:02d}T10:00:00+00:00".format
    write_run(out, "d1", NOTEBOOK, day(20), claim_metrics(HOLDS, loss=0.111), commit="d1" * 8)
    write_run(out, "c1", NOTEBOOK, day(21), claim_metrics(INCONCLUSIVE, loss=0.555),
              commit="c1" * 8,
              parameters=CLAIM, overrides={"preset": "claim"})
    write_run(out, "d2", NOTEBOOK, day(22), claim_metrics(HOLDS, loss=0.222), commit="d2" * 8)
    write_run(out, "d3", NOTEBOOK, day(23), claim_metrics(FAILS, loss=0.333), commit="d3" * 8)
    write_run(out, "d4", NOTEBOOK, day(24), claim_metrics(HOLDS, loss=0.444), commit="d4" * 8,
              status="failed")
    write_run(out, "c2", NOTEBOOK, day(25), claim_metrics(INCONCLUSIVE, loss=0.666),
              commit="c2" * 8,
              parameters=CLAIM, overrides={"preset": "claim"})
    write_run(out, "g1", NOTEBOOK, day(26), claim_metrics(FAILS, loss=0.777), commit="g1" * 8,
              parameters=CLAIM, devices=[f"cuda:0 {H100}"])
    write_run(out, "v1", "02_vsml.ipynb", day(20), claim_metrics(HOLDS, loss=0.888))


def test_claim_history_is_newest_first_per_scale_and_flags_changed_verdicts(tmp_path):
    out = tmp_path / "reports"
    history_runs(out)
    history = claim_history(load_runs(out))

    def seen(scale, claim="faster_per_epoch", notebook=NOTEBOOK):
        return [(e["run"]["name"], e["verdict"], e["was"], e["commit"], e["date"],
                 e["numbers"]["loss, ProxProp"]) for e in history[notebook, scale, claim]]

    # newest first; d4 failed and is no part of it; the claim preset's runs between d1 and
    # d3 do not break the default's sequence; d3 is the one whose verdict changed
    assert seen(DEFAULT) == [("d3", FAILS, HOLDS, "d3d3d3d3", "2026-11-23", "0.333"),
                             ("d2", HOLDS, None, "d2d2d2d2", "2026-11-22", "0.222"),
                             ("d1", HOLDS, None, "d1d1d1d1", "2026-11-20", "0.111")]
    assert seen(CLAIM_CPU) == [("c2", INCONCLUSIVE, None, "c2c2c2c2", "2026-11-25", "0.666"),
                               ("c1", INCONCLUSIVE, None, "c1c1c1c1", "2026-11-21", "0.555")]
    # the same preset on a GPU is a scale of its own: its "does not hold" flags nothing
    assert seen(Scale(2, "claim", H100)) == [("g1", FAILS, None, "g1g1g1g1", "2026-11-26",
                                              "0.777")]
    assert [(e["run"]["name"], e["verdict"], e["was"])
            for e in history[NOTEBOOK, DEFAULT, "stable"]] == [
        ("d3", UNTESTED, None), ("d2", UNTESTED, None), ("d1", UNTESTED, None)]
    assert len(history) == 8  # 2 claims, at 3 scales of notebook 01 and 1 of notebook 02
    # the order of the runs given does not matter: each history is sorted by its start
    assert claim_history(load_runs(out)[::-1]) == history

    (fast, stable) = [r for r in claim_rows(load_runs(out)) if r["notebook"] == NOTEBOOK]
    assert [(c["label"], c["was"], len(c["history"])) for c in fast["cells"]] == [
        ("default", HOLDS, 3), ("preset claim", None, 2), (f"{H100}, preset claim", None, 1)]
    assert (fast["earlier"], fast["changes"]) == (3, 1)
    assert (stable["earlier"], stable["changes"]) == (3, 0)


def test_dashboard_shows_each_claims_history_and_flags_a_changed_verdict(tmp_path):
    out = tmp_path / "reports"
    history_runs(out)
    build_index(out)
    page = (out / "claims.html").read_text()
    rows = re.findall(r'<tr data-notebook="([^"]+)" data-claim="([^"]*)"[^>]*>(.*?)\n  </tr>',
                      page, re.S)
    by_claim = {(notebook, claim): body for notebook, claim, body in rows}
    fast, stable = by_claim[NOTEBOOK, "faster_per_epoch"], by_claim[NOTEBOOK, "stable"]

    # on the row itself, outside the collapsed history: the flag on the default cell only
    cells, history = fast.split('<details class="history">')
    scales = dict(re.findall(r'data-scale="([^"]*)">(.*?)\n      </div>', cells, re.S))
    assert "verdict changed: was holds</span>" in scales["default"]
    assert "verdict changed" not in scales["preset claim"] + scales[f"{H100}, preset claim"]
    assert "0.222" not in cells and "0.333" in cells  # the latest run's numbers only

    # the history: every ok run at each scale, newest first, with date, commit and numbers
    assert "<summary>history: 3 earlier runs, the verdict changed 1 time</summary>" in history
    entries = re.findall(r'<tr data-scale="([^"]*)">.*?<td class="date">([^<]*)</td>\s*'
                         r'<td><code class="commit">([^<]*)</code></td>(.*?)</tr>', history, re.S)
    assert [(scale, date, commit) for scale, date, commit, _ in entries] == [
        ("default", "2026-11-23 10:00", "d3d3d3d3"), ("default", "2026-11-22 10:00", "d2d2d2d2"),
        ("default", "2026-11-20 10:00", "d1d1d1d1"),
        ("preset claim", "2026-11-25 10:00", "c2c2c2c2"),
        ("preset claim", "2026-11-21 10:00", "c1c1c1c1"),
        (f"{H100}, preset claim", "2026-11-26 10:00", "g1g1g1g1")]
    flagged = [date for _, date, _, rest in entries if "verdict changed" in rest]
    assert flagged == ["2026-11-23 10:00"]
    assert ">does not hold</span> <span class=\"changed\">verdict changed: was holds" \
        in entries[0][3]
    assert "loss, ProxProp <b>0.222</b>" in entries[1][3] and "0.444" not in page  # not failed d4
    assert 'href="runs/d2/report.html"' in entries[1][3]

    # a claim whose verdict never changed: a history, and no flag anywhere in its row
    assert "<summary>history: 3 earlier runs</summary>" in stable
    assert "verdict changed" not in stable
    # a claim measured once: no history to open
    assert "<details" not in by_claim["02_vsml.ipynb", "faster_per_epoch"]


def test_index_links_a_reused_latest_report_to_the_run_it_reused(tmp_path):
    out = tmp_path / "reports"
    write_run(out, "a-1", "a.ipynb", "2026-11-20T10:00:00+00:00", claim_metrics(HOLDS))
    write_run(out, "a-2", "a.ipynb", "2026-11-22T10:00:00+00:00", claim_metrics(HOLDS),
              parameters=CLAIM, overrides={"preset": "claim"})
    write_run(out, "b-1", "b.ipynb", "2026-11-21T10:00:00+00:00", claim_metrics(FAILS))
    for stem in ("a", "b", "c"):
        (out / f"{stem}.html").write_text("<html>latest</html>")
    (out / "reused.json").write_text(json.dumps({
        "a.ipynb": {"run": "a-1", "reused_at": "2026-11-23T09:00:00+00:00"},
        "c.ipynb": {"run": "c-gone", "reused_at": "2026-11-23T09:00:01+00:00"},
        "d.ipynb": "not a record"}))

    assert list(reuses(out)) == ["a.ipynb", "c.ipynb"]
    pages = latest_reports(["c", "a", "b"], reuses(out), load_runs(out))
    assert {stem: (page["href"], page["reused"] and page["reused"]["name"])
            for stem, page in pages.items()} == {"a": ("a.html", "a-1"), "b": ("b.html", None),
                                                 "c": ("c.html", "c-gone")}
    assert pages["a"]["reused"]["run"]["name"] == "a-1" and pages["c"]["reused"]["run"] is None

    build_index(out)
    index = (out / "index.html").read_text()
    latest = index.split("Latest report per notebook", 1)[1].split("</p>", 1)[0]
    assert re.search(r'<a href="a.html">a</a> <span class="reused" data-reused="a-1">reused '
                     r'<a href="runs/a-1/report.html" title="a-1, reused 2026-11-23 09:00">'
                     r'the run of 2026-11-20 10:00</a>',
                     latest)
    assert re.search(r'<a href="b.html">b</a>, ', latest)  # not reused: no link
    assert 'data-reused="c-gone">reused <code>c-gone</code> (gone)' in latest
    rows = dict(re.findall(r'<tr data-notebook="[^"]*" data-status="ok" id="run-([^"]+)">'
                           r'(.*?)</tr>', index, re.S))
    assert set(rows) == {"a-1", "a-2", "b-1"}
    assert ">reused 2026-11-23 09:00</span>" in rows["a-1"]
    assert "reused" not in rows["a-2"] + rows["b-1"]
