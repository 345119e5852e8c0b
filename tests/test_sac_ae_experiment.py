"""The SAC-AE reproduction's claims: declared once, decided from per-seed returns."""

import numpy as np
import pytest

from lab.experiments.sac_ae import CLAIMS, describe, rederive, summary
from lab.runs.claims import FAILS, HOLDS, INCONCLUSIVE, SMALLER, TOO_SMALL
from lab.runs.verdict import mismatches


def metrics(sac_ae, pixel_sac, env_steps=80_000, threshold=258.3):
    """:func:`lab.experiments.sac_ae.verdict`'s numbers for hand-made per-seed returns."""
    return {"env": "pendulum_swingup", "image_size": 24, "env_steps": env_steps,
            "agent_steps": env_steps // 8, "seeds": len(sac_ae), "threshold": threshold,
            "random_return": 11.1,
            "sac_ae_final_returns": sac_ae, "sac_ae_final_return": float(np.mean(sac_ae)),
            "sac_ae_final_return_std": float(np.std(sac_ae)),
            "pixel_sac_final_returns": pixel_sac,
            "pixel_sac_final_return": float(np.mean(pixel_sac)),
            "pixel_sac_final_return_std": float(np.std(pixel_sac)),
            "sac_ae_minus_pixel_sac": float(np.mean(sac_ae) - np.mean(pixel_sac)),
            "seeds_sac_ae_ahead": int(sum(a > b for a, b in zip(sac_ae, pixel_sac, strict=True))),
            "sac_ae_mean_eval_return": 40.0, "pixel_sac_mean_eval_return": 45.0,
            "sac_ae_train_seconds": 60.0, "pixel_sac_train_seconds": 50.0}


def claims(m):
    return {c["name"]: c for c in summary(m)["claims"]}


@pytest.mark.parametrize("sac_ae, pixel_sac, expected", [
    ([500.0 + s for s in range(6)], [400.0 - s for s in range(6)], HOLDS),  # +100..+110
    ([500.0, 560.0, 470.0], [400.0, 400.0, 400.0], INCONCLUSIVE),  # 3 seeds: p >= 1/8
    ([508.5, 532.9, 382.9], [482.7, 456.9, 426.4], INCONCLUSIVE),  # behind on one seed
    ([420.0 + s for s in range(6)], [400.0] * 6, SMALLER),  # +20..+25: below the +50
    ([300.0, 340.0, 280.0, 310.0, 290.0], [400.0, 420.0, 410.0, 405.0, 395.0],
     FAILS),  # behind on every one of five seeds (three could not decide it)
])
def test_beats_pixel_sac_is_paired_by_seed(sac_ae, pixel_sac, expected):
    claim = claims(metrics(sac_ae, pixel_sac))["beats_pixel_sac"]
    assert claim["verdict"] == expected
    assert claim["values"] == [[a, b] for a, b in zip(sac_ae, pixel_sac, strict=True)]
    np.testing.assert_allclose(claim["effect"], np.mean(sac_ae) - np.mean(pixel_sac))
    assert "weakly" not in describe(metrics(sac_ae, pixel_sac))


def test_learns_above_threshold_judges_each_seed_against_the_runs_threshold():
    many = claims(metrics([450.0, 500.0, 520.0, 480.0, 470.0, 510.0], [0.0] * 6))
    assert many["learns_above_threshold"]["verdict"] == HOLDS
    assert many["learns_above_threshold"]["threshold"] == 258.3
    three = claims(metrics([508.5, 532.9, 382.9], [0.0] * 3))["learns_above_threshold"]
    assert three["verdict"] == INCONCLUSIVE and three["p"] == 1 / 8
    assert ["lowest seed", 382.9] in three["numbers"]
    below = claims(metrics([100.0, 120.0, 90.0, 110.0, 95.0], [0.0] * 5))["learns_above_threshold"]
    assert below["verdict"] == FAILS


def test_claims_below_their_budget_are_too_small_to_decide():
    m = metrics([70.0, 80.0, 90.0, 75.0, 85.0], [90.0, 98.0, 106.0, 95.0, 101.0], env_steps=12_000)
    decided = claims(m)
    assert [c["verdict"] for c in decided.values()] == [TOO_SMALL, TOO_SMALL]
    assert decided["beats_pixel_sac"]["measured_verdict"] == FAILS
    assert decided["beats_pixel_sac"]["decidable_at"] == CLAIMS["beats_pixel_sac"].decidable_at
    assert ("too small to decide here (measured: does not hold; deciding it needs 80,000 "
            "environment steps, this run had 12,000)") in describe(m)
    at_budget = claims(m | {"env_steps": 80_000, "agent_steps": 10_000})
    assert [c["verdict"] for c in at_budget.values()] == [FAILS, FAILS]


def test_rederive_reproduces_a_record_and_the_rule_verifies_it():
    m = metrics([551.6, 510.0, 445.3], [368.2, 422.0, 361.7])
    again = rederive(m, {"preset": "claim"})
    assert again == summary(m)
    assert mismatches(again["claims"]) == []
    assert again["study"]["measured"] == "pendulum_swingup at 24x24, 80,000 environment steps, " \
                                         "3 seeds"


def test_one_variant_tests_only_the_threshold_claim():
    m = metrics([500.0, 560.0, 450.0], [0.0] * 3)
    for key in ("pixel_sac_final_returns", "pixel_sac_final_return", "sac_ae_minus_pixel_sac"):
        del m[key]
    assert list(claims(m)) == ["learns_above_threshold"]
