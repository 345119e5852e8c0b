"""The causal model selection experiment: its parameter checks (one line each, before any
work), one trial end to end, the paired comparison on a hand case, the diabetes protocol,
the verdict, the live panel and the benchmark."""

import subprocess
import sys

import numpy as np
import pytest

from lab.experiments import causal_selection as experiment
from lab.experiments import notebook_parameters
from tests.conftest import ROOT, WAIT
from tests.smoke import SMOKE

NOTEBOOK = {name: p.default for name, p in
            notebook_parameters(ROOT / "notebooks" / "14_causal_selection.ipynb").items()}
TINY = NOTEBOOK | SMOKE["14_causal_selection"]


@pytest.mark.parametrize("change, message", [
    ({"lam": -0.5}, "lambda must be at least 0, got -0.5; use 0 for the validation error"),
    ({"lam": "parents"}, "lam must be a number >= 0 or 'ancestors', got 'parents'"),
    ({"mechanisms": ["quadratic"]}, "mechanisms ['quadratic'] must be a non-empty list of "
                                    "linear, nonlinear"),
    ({"shifts": []}, "shifts [] must be a non-empty list of all, one"),
    ({"nodes": [4, 20]}, "nodes [4, 20] must be graph sizes from 2 to 12"),
    ({"candidates": 1}, "repeats and candidates must be at least 2"),
    ({"top_fraction": 0}, "top_fraction must be in (0, 1], got 0"),
    ({"preset": "huge"}, "unknown preset 'huge'; choose one of default, claim"),
    ({"optimizer": "rmsprop"}, "unknown optimizer 'rmsprop'; use one of adam, sgd"),
    ({"stop_every": 500}, "stop_every must be between 0 (no early stopping) and steps 300, "
                          "got 500"),
])
def test_bad_parameters_are_one_line_errors(change, message):
    with pytest.raises(ValueError) as error:
        experiment.configure(**(NOTEBOOK | change))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_the_notebook_defaults_configure_and_select_the_top_tenth():
    setup = experiment.configure(**NOTEBOOK)
    assert setup.k == 10 and setup.lam == "ancestors"
    assert experiment.rule_names(setup) == ["validation", "causal_fixed", "impostor_fixed",
                                            "causal_search", "impostor_search",
                                            "flipped_search", "oracle"]


def test_a_trial_scores_every_rule_and_the_oracle_is_the_floor():
    setup = experiment.configure(**TINY)
    t = experiment.trial(setup, 4, "linear", 0)
    again = experiment.trial(setup, 4, "linear", 0)
    np.testing.assert_array_equal(t["validation"], again["validation"])  # reproducible
    names, target = t["names"], t["target"]
    edges = np.asarray(t["edges"])
    j = names.index(target)
    assert not edges[j].any() and edges[:, j].any()  # a sink with a parent
    assert t["shifted_input"] != target
    assert set(t["results"]) == set(setup.shifts)
    for shift, res in t["results"].items():
        assert set(res) == set(experiment.rule_names(setup))
        assert all(len(r["chosen"]) == setup.k for r in res.values())
        best = res["oracle"]["ood"]
        assert all(r["ood"] >= best - 1e-12 for r in res.values())
        assert res["oracle"]["normalised"] <= min(r["normalised"] for r in res.values())
        ood = t["ood"][shift]
        chosen = res["validation"]["chosen"]
        assert res["validation"]["ood"] == pytest.approx(ood[chosen].mean())
        assert set(chosen) == set(np.argsort(t["validation"])[:setup.k])
    assert np.all((t["stopped_at"] > 0) & (t["stopped_at"] <= setup.steps))


def test_paired_counts_wins_and_tests_one_sided_on_a_hand_case():
    def trial(rule, base):
        return {"results": {"s": {"r": {"normalised": rule, "ood": rule},
                                  "validation": {"normalised": base, "ood": base}}}}

    trials = [trial(0.1, 0.5)] * 8 + [trial(0.3, 0.3), trial(0.6, 0.2)]
    p = experiment.paired(trials, "s", "r")
    assert (p["wins"], p["ties"], p["losses"]) == (8, 1, 1)
    assert p["rule"] == pytest.approx((8 * 0.1 + 0.3 + 0.6) / 10)
    assert p["p"] < 0.05
    assert experiment.paired([trial(0.5, 0.5)] * 3, "s", "r")["p"] == 1.0  # all ties


def test_diabetes_known_graph_keeps_the_tiers_and_a_trial_holds_out_an_extreme():
    graph = experiment.diabetes_graph()
    tier = {n: t for t, members in enumerate(experiment.DIABETES_TIERS) for n in members}
    for parent, child in graph.edge_list():
        assert tier[parent] <= tier[child]
    assert not graph.children(graph.index("progression")).size  # the target causes nothing
    setup = experiment.configure(**TINY)
    t = experiment.diabetes_trial(setup, 0)
    assert list(t["results"]) == ["held_out"]
    assert t["side"] in ("smallest", "largest") and t["shifted_input"] != "progression"
    assert len(t["ood"]["held_out"]) == setup.candidates


def test_verdict_and_summary_name_every_claim():
    setup = experiment.configure(**TINY)
    trials = experiment.study(setup)
    m = experiment.verdict(setup, trials)
    s = experiment.summary(m, setup)
    assert [c["name"] for c in s["claims"]] == ["causal_beats_validation",
                                                "impostor_does_not", "real_data"]
    cells = len(setup.nodes) * len(setup.mechanisms) * len(setup.shifts)
    assert m["cells"] == cells and len(m["table"]) == cells + 1
    pooled = m["pooled_causal_search"]
    assert pooled["trials"] == setup.repeats * cells
    assert pooled["wins"] + pooled["ties"] + pooled["losses"] == pooled["trials"]
    linear = m["by_mechanism"]["linear"]["causal_search"]
    assert linear["trials"] == pooled["trials"]  # the smoke cells are all linear
    curves = experiment.curves(m)
    assert len(curves["validation_normalised_ood"]["y"]) == cells + 1


def test_panel_opens_on_a_trial_and_runs_a_new_one():
    from lab.widgets.causal_selection_panel import causal_selection_panel

    setup = experiment.configure(**TINY)
    first = experiment.trial(setup, 4, "linear", 0)
    panel = causal_selection_panel(TINY, first)
    assert panel.data["trial"] is first and panel.png()
    panel.min_interval = 0.0
    panel.controls.widgets["nodes"].value = 5
    panel.controls.widgets["shift"].value = "one"
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    assert len(panel.result["names"]) == 5 and panel.png()


def test_benchmark_quick_prints_training_and_scoring_side_by_side():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "causal_selection.py"),
                          "--quick", "--nodes", "4", "6", "--repeats", "1", "--rows", "200"],
                         capture_output=True, text=True, cwd=ROOT, timeout=2 * WAIT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("causal model selection: 8 candidates, 20 steps")
    assert lines[1].startswith("training: vmapped") and "loop / vmapped" in lines[1]
    assert [line.split()[0] for line in lines[3:5]] == ["4", "6"]
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "causal_selection.py"),
                          "--nodes", "1"], capture_output=True, text=True, cwd=ROOT,
                         timeout=WAIT)
    assert bad.returncode == 2 and "--nodes at least 2" in bad.stderr
