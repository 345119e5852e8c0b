"""The VS-ML reproduction's bookkeeping: configuration and the claims' verdict."""

import numpy as np
import pytest

from lab.experiments.vsml import BASELINES, configure, describe, verdict

DEFAULTS = dict(method="gradient", iterations=2, tasks_per_batch=2, lr=1e-3, population=4,
                inputs=4, classes=3, steps=5, test_steps=4, test_episodes=2, seeds=1,
                tasks=["iris", "sum_sign"])


def _curves(vsml, meta_rnn, baseline, steps=4):
    by_learner = {"vsml": np.full((2, steps), vsml), "meta_rnn": np.full((2, steps), meta_rnn)}
    return by_learner | {name: np.full(steps, baseline) for name in BASELINES}


def test_verdict_checks_each_claim_against_its_threshold():
    curves = {"iris": _curves(0.6, 0.5, 0.55), "sum_sign": _curves(0.55, 0.6, 0.7)}
    v = verdict(curves, {"iris": 1 / 3, "sum_sign": 0.5})
    assert v["tasks_vsml_above_chance"] == ["iris"]  # 0.55 < 0.5 + 0.1
    assert not v["claim_above_chance_on_every_task"]
    assert v["tasks_vsml_beats_baselines"] == ["iris"]
    assert v["tasks_vsml_beats_meta_rnn"] == ["iris"]
    np.testing.assert_allclose(v["mean_vsml_accuracy"], 0.575)
    assert v["claim_generalises_better_than_meta_rnn"]  # mean 0.575 against 0.55
    text = " ".join(describe(v, configure(**DEFAULTS)).split())
    assert "| iris | 0.33 | 0.600 | 0.500 | 0.550 |" in text


@pytest.mark.parametrize("change, message", [
    ({"tasks": ["imagenet"]}, "unknown meta-test task"), ({"test_steps": 0}, "test_steps must"),
    ({"population": 3}, "population must be even"), ({"classes": 11}, "classes must be between"),
])
def test_configure_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        configure(**DEFAULTS | change)
