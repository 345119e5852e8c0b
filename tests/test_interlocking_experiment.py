"""The interlocking experiment's verdict arithmetic against hand-computed cases, its
parameter checks, and its live panel."""

import numpy as np
import pytest
from IPython.display import Image

from lab.experiments import interlocking as experiment
from lab.parallel import interlocking as schedule
from tests.conftest import WAIT
from tests.smoke import SMOKE

NOTEBOOK = dict(preset="default", tasks=["images", "text"],
                rules=["global", "local", "pairwise", "3-wise"], seeds=3, channels=8, blocks=2,
                head_channels=4, image_batch=32, image_steps=400, image_lr=0.002,
                image_target=0.75, hidden=32, heads=4, length=32, text_batch=16,
                text_steps=600, text_lr=0.003, text_target=3.0, eval_every=50,
                eval_examples=1000, timing_repeats=5, pipeline_batches=6, seed=0)


def study(finals: dict[str, list[float]], higher_is_better: bool = True) -> dict:
    return {"higher_is_better": higher_is_better, "metric": "m", "target": 0.5,
            "source": {}, "runs": {r: {"final": f, "steps": [1], "curve": [[v] for v in f],
                                       "seconds": 0.0} for r, f in finals.items()}}


def test_gap_fraction_is_the_share_of_global_over_local_recovered():
    s = study({"global": [0.8, 0.8], "local": [0.6, 0.6], "pairwise": [0.75, 0.75],
               "3-wise": [0.65, 0.65]})
    gaps = experiment.gap_fractions(s)
    assert gaps["gap"] == pytest.approx(0.2) and gaps["noise"] == 0.0
    assert gaps["fractions"]["pairwise"] == pytest.approx(0.75)
    assert gaps["fractions"]["3-wise"] == pytest.approx(0.25)
    # bits per character: lower is better, the same shares
    bits = study({"global": [2.0], "local": [3.0], "pairwise": [2.25]}, higher_is_better=False)
    assert experiment.gap_fractions(bits)["fractions"]["pairwise"] == pytest.approx(0.75)
    # no gap (local as good as global): nothing to recover
    flat = experiment.gap_fractions(study({"global": [0.6], "local": [0.7], "pairwise": [0.6]}))
    assert flat["fractions"]["pairwise"] is None


def test_verdict_claims_from_gaps_and_modelled_times():
    setup = experiment.configure(**(NOTEBOOK | {"tasks": ["images"]}))
    s = study({"global": [0.8, 0.8, 0.8], "local": [0.6, 0.6, 0.6],
               "pairwise": [0.75, 0.76, 0.74], "3-wise": [0.78, 0.78, 0.78]})
    ones = [1.0] * 4
    times = schedule.Times(ones, ones, ones, ones, ones, [0.0] * 4)
    timing = {"images": {"times": {}, "rules": {
        r: schedule.summary(4, n, times) for r, n in
        (("global", 4), ("local", 1), ("pairwise", 2), ("3-wise", 3))}}}
    m = experiment.verdict(setup, {"images": s}, timing, [])
    assert m["images_pairwise_gap_fraction"] == pytest.approx(0.75)
    assert m["claim_accuracy_images"] is True
    # unit op times: local 3, pairwise 5, 3-wise 7, global 9 per batch (tests/test_interlocking)
    assert m["images_time_closeness"]["pairwise"] == pytest.approx(2 / 6)
    assert m["images_time_closeness"]["3-wise"] == pytest.approx(4 / 6)
    assert m["claim_time_images"] is True and m["time_weakly_images"]  # 3-wise past the middle
    assert m["claim_pipeline_exact"] is None
    claims = experiment.summary(m, setup)["claims"]
    assert [c["name"] for c in claims] == ["recovers_accuracy_images", "near_local_time_images"]
    assert [c["verdict"] for c in claims] == ["holds", "weakly"]


@pytest.mark.parametrize("change, message", [
    ({"channels": 6}, "channels 6 and head_channels 4 must be multiples of 4"),
    ({"rules": []}, "rules is empty"),
    ({"text_steps": 0}, "text_steps 0 must be a positive multiple of eval_every 50"),
    ({"image_target": 1.5}, "image_target must be an accuracy in (0, 1)"),
])
def test_configure_refuses_bad_values_in_one_line(change, message):
    with pytest.raises(ValueError) as error:
        experiment.configure(**(NOTEBOOK | change))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_interlocking_panel_trains_live_and_refuses_bad_rules():
    from lab.widgets.interlocking_panel import interlocking_panel

    panel = interlocking_panel(NOTEBOOK | SMOKE["11_interlocking"])
    panel.min_interval = 0.0
    panel.controls.widgets["task"].value = "text"
    panel.controls.widgets["rule"].value = "9-wise"
    assert panel.run() is False and panel.state == "idle"
    panel.controls.widgets["rule"].value = "pairwise"
    panel.controls.widgets["steps"].value = 10
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    assert panel.result["steps"] == [5, 10] and np.isfinite(panel.result["bits"]).all()
    assert panel.draws >= 1 and isinstance(panel.show(headless=True), Image)
