"""The shared verdict rule (lab.runs.verdict) on hand-computed cases, ``lab claims verify`` on
every record in results/, and a changed declaration flagged on the dashboard."""

import json
import re

import pytest

from lab.cli import main
from lab.runs import build_index
from lab.runs.claims import (
    CHECK,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    LESS,
    PAIRED,
    SMALLER,
    THRESHOLD,
    TOO_SMALL,
    Declaration,
    judge,
    summary,
)
from lab.runs.report import load_runs
from lab.runs.verdict import decide, fingerprint, holm, mismatches
from tests.conftest import ROOT
from tests.test_reports import write_run


def declared(name="c", comparison=THRESHOLD, threshold=0.0, minimum_effect=1.0, **changes):
    return Declaration(name=name, statement="s", quote="q", source="Sec. 1", unit="seed",
                       measure="m", comparison=comparison, threshold=threshold,
                       minimum_effect=minimum_effect, **changes)


def one(values, baseline=None, **changes) -> dict:
    (entry,) = decide([judge(declared(**changes), values, baseline)])
    return entry


def test_known_effect_interval_and_p_by_hand():
    # d = 0, 3, 6: the 27 equally likely resamples of three have mean 0 (and 6) with
    # probability 1/27 > 2.5% each, so the percentile interval is [0, 6]; flipping the signs
    # of 3 and 6 (0's sign changes nothing) gives means 3, 1, -1, -3: P(mean >= 3) = 2/8
    e = one([10.0, 13.0, 16.0], threshold=10.0)
    assert (e["n"], e["effect"], e["ci"], e["p_raw"], e["p"]) == (3, 3.0, [0.0, 6.0], 0.25,
                                                                  0.25)
    assert e["verdict"] == INCONCLUSIVE  # interval holds both 0 and the smallest effect 1
    # paired, pointing down: the baseline minus the claimed is what counts
    paired = one([1.0, 1.0, 1.0, 1.0, 1.0], [3.0, 3.5, 3.0, 3.5, 3.0], comparison=PAIRED,
                 direction=LESS, threshold=None)
    assert paired["effect"] == pytest.approx(2.2) and paired["p"] == pytest.approx(1 / 32)
    assert paired["verdict"] == HOLDS


def test_three_seeds_all_ahead_is_not_significant():
    # every seed ahead by far: the interval is above 0, but a sign-flip test of 3 units can
    # never go below 1/8, so no effect is not excluded
    e = one([5.0, 6.0, 7.0])
    assert e["ci"][0] > 0 and e["p"] == 0.125
    assert e["verdict"] == INCONCLUSIVE and e["units_to_decide"] >= 5  # 2^-5 < 0.05 <= 2^-4
    assert one([5.0, 6.0, 7.0, 5.5, 6.5])["verdict"] == HOLDS  # five: p = 1/32


def test_a_family_of_five_corrects_the_one_that_clears_alone():
    ahead = [2.0, 2.5, 3.0, 2.2, 2.8]  # p = 1/32 alone
    mixed = [1.0, -1.0, 0.5, -0.5, 0.2]
    alone = decide([judge(declared("only"), ahead)])[0]
    assert alone["verdict"] == HOLDS and alone["p"] == pytest.approx(1 / 32)
    family = decide([judge(declared("r0", family="rules"), ahead)]
                    + [judge(declared(f"r{i}", family="rules"), mixed) for i in range(1, 5)])
    assert family[0]["p_raw"] == pytest.approx(1 / 32)
    assert family[0]["p"] == pytest.approx(5 / 32)  # Holm: the smallest of five times five
    assert family[0]["family_size"] == 5 and family[0]["verdict"] == INCONCLUSIVE
    # a different family is corrected on its own
    other = decide([judge(declared("a", family="x"), ahead),
                    judge(declared("b", family="y"), ahead)])
    assert [e["p"] for e in other] == [pytest.approx(1 / 32)] * 2
    # our Holm gives statsmodels' numbers (ties and values that reach 1 included)
    from statsmodels.stats.multitest import multipletests

    for p in ([0.01, 0.04, 0.03, 0.5], [0.02, 0.02, 0.9, 0.001, 0.3], [0.5, 0.6], [0.2]):
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), rel=1e-12)


def test_an_interval_that_rules_out_the_claimed_effect():
    near_zero = [-0.5, 0.4, -0.2, 0.3, 0.1, -0.1]
    e = one(near_zero, minimum_effect=2.0)
    assert e["ci"][1] < 2.0 and e["verdict"] == FAILS  # the data rule out an effect of 2
    assert one(near_zero, minimum_effect=0.1)["verdict"] == INCONCLUSIVE  # 0.1 not ruled out
    # ruling the effect out needs the test the other way too: two identical misses (an
    # interval of zero width) or three seeds all far below decide nothing
    assert one([0.0, 0.0], minimum_effect=0.5)["verdict"] == INCONCLUSIVE
    three = one([-5.0, -6.0, -7.0])
    assert three["ci"][1] < 1.0 and three["p_against"] == 0.125
    assert three["verdict"] == INCONCLUSIVE
    small = one([0.2, 0.25, 0.3, 0.2, 0.25], minimum_effect=1.0)
    assert small["verdict"] == SMALLER  # clearly above 0, clearly short of 1


def test_checks_budgets_and_untested():
    check = declared(comparison=CHECK, direction=LESS, threshold=1e-6, minimum_effect=0.0)
    held, failed = decide([judge(check, [1e-7, 5e-7]), judge(check, [1e-7, 2e-6])])
    assert (held["verdict"], held["ci"], held["p"]) == (HOLDS, None, None)
    assert failed["verdict"] == FAILS
    budgeted = declared(decidable_at=11_000, budget_unit="steps")
    short, enough = decide([judge(budgeted, [5.0] * 5, budget=3_000),
                            judge(declared("d", decidable_at=11_000), [5.0] * 5, budget=11_000)])
    assert (short["verdict"], short["measured_verdict"]) == (TOO_SMALL, HOLDS)
    assert enough["verdict"] == HOLDS
    assert one(None)["verdict"] == "not tested"
    with pytest.raises(ValueError, match="needs a baseline"):
        judge(declared(comparison=PAIRED), [1.0, 2.0])


def test_verify_finds_a_changed_verdict_or_criterion():
    entries = decide([judge(declared("a"), [5.0, 6.0, 7.0, 5.5, 6.5]),
                      judge(declared("b"), [0.5, -0.5, 2.0])])
    assert mismatches(entries) == []
    forced = [dict(entries[0], verdict=HOLDS), dict(entries[1], verdict=HOLDS)]
    assert mismatches(forced) == ["b: verdict recorded 'holds', recomputed 'inconclusive'"]
    tuned = [dict(entries[0], minimum_effect=10.0)]  # a criterion edited in the record
    assert any("fingerprint" in line for line in mismatches(tuned))
    legacy = [{"name": "old", "statement": "s", "verdict": "weakly", "numbers": []}]
    assert "recorded before the shared verdict rule" in mismatches(legacy)[0]


def test_every_record_in_results_reproduces_its_verdicts(capsys):
    assert main(["claims", "verify", str(ROOT / "results")]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "MISMATCH" not in out and "reproduce their recorded verdicts" in out


def test_verify_refuses_a_missing_folder_in_one_line(tmp_path, capsys):
    assert main(["claims", "verify", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such folder" in err


def test_dashboard_marks_a_criterion_changed_after_an_earlier_run(tmp_path):
    out = tmp_path / "reports"
    study = {"paper": "p", "measured": "m"}
    for name, day, minimum in (("r1", 20, 1.0), ("r2", 21, 1.0), ("r3", 22, 0.5)):
        claim = judge(declared("gain", minimum_effect=minimum), [2.0, 2.5, 3.0, 2.2, 2.8])
        write_run(out, name, "01_proxprop.ipynb", f"2026-11-{day}T10:00:00+00:00",
                  summary(claims=[claim], **study))
    build_index(out)
    page = (out / "claims.html").read_text()
    old, new = (fingerprint(declared("gain", minimum_effect=m)) for m in (1.0, 0.5))
    flag = f"criterion changed after the run of 2026-11-21 ({old} -&gt; {new})"
    latest = re.sub(r"<details.*?</details>", "", page, flags=re.S)
    assert flag in latest  # on r3's cell, the latest
    table = page.split('<table id="claims">')[1]
    assert table.count("criterion changed after") == 2  # and once in the history, r3 only
    run_flags = json.dumps([c["flags"] for c in load_runs(out)[0]["claims"]])
    assert "criterion changed" not in run_flags  # a run alone cannot know; the page can
