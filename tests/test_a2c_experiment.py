"""The A2C workload's curves (``lab.experiments.a2c``): configurations sharing t_max train as
one vmapped program, each as it would alone; a stop ends its group; bad values are refused."""

import numpy as np
import pytest

from lab.experiments import a2c as experiment

A = {"learning_rate": 1e-3, "t_max": 3, "discount": 0.9}
B = {"learning_rate": 3e-4, "t_max": 3, "discount": 0.99}
C = {"learning_rate": 3e-4, "t_max": 4, "discount": 0.99}
TINY = dict(envs=2, steps=120, evaluations=2, seeds=2)


def test_a_configuration_learns_alike_alone_and_beside_others():
    together, at = experiment.curves([A, B, C], **TINY)
    alone, at_alone = experiment.curves([B], **TINY)
    assert together.shape == (3, 2, 2) and at.shape == (3, 2)
    np.testing.assert_allclose(together[1], alone[0], rtol=1e-5)  # B beside A and C
    # whole updates of envs x t_max steps: 60 steps per evaluation, 10 or 7.5 -> 8 updates
    assert at[0].tolist() == [60, 120] and at[2].tolist() == [64, 128]
    assert at_alone[0].tolist() == [60, 120]


def test_a_stop_ends_the_group_and_leaves_its_later_points_empty():
    seen = []

    def stop_after_first(e, returns):
        seen.append((e, returns.shape))
        return False

    returns, _ = experiment.curves([A, B, C], **TINY, on_evaluation=stop_after_first)
    assert seen == [(0, (2, 2)), (0, (1, 2))]  # one call per t_max group, then stopped
    assert np.isnan(returns[:, :, 1]).all()


NOTEBOOK = {"preset": "default", "game": "breakout", "sticky": 0.1, "learning_rate": 3e-4,
            "t_max": 5, "discount": 0.99, "entropy_cost": 0.01, "envs": 4, "seeds": 1,
            "total_steps": 200, "eval_every": 100, "seed": 0}


@pytest.mark.parametrize("change, message", [
    ({"game": "pong"}, "unknown game 'pong'; choose one of breakout"),
    ({"t_max": 0}, "t_max must be at least 1, got 0"),
    ({"discount": 1.5}, r"discount must be in \(0, 1\], got 1.5"),
    ({"learning_rate": 0}, "learning_rate must be positive, got 0"),
    ({"total_steps": 150}, r"total_steps \(150\) must be a multiple of eval_every \(100\)"),
    ({"preset": "huge"}, "unknown preset 'huge'; choose one of default"),
])
def test_bad_values_are_refused_with_the_fix(change, message):
    assert experiment.configure(**NOTEBOOK).evaluations == 2
    with pytest.raises(ValueError, match=message):
        experiment.configure(**(NOTEBOOK | change))
