"""The VS-ML compute study: budgets along one resumable run, FLOP counting, the gap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.experiments import vsml_compute
from lab.experiments.vsml_compute import Study, gap, train_to_budgets, xla_flops
from lab.train.vsml import MetaConfig, make_meta_train

TINY = {"inputs": 4, "classes": 2, "steps": 3, "tasks": 1, "seeds": 2, "test_episodes": 4}


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_train_to_budgets_resumed_equals_uninterrupted_and_meta_train(tmp_path):
    study = Study(budgets=(2, 4), every=2, **TINY)
    source = vsml_compute.sources(study).train
    straight = list(train_to_budgets(study, source, tmp_path / "a", log=lambda _: None))
    # a shorter run first, then a longer one in the same folder resumes from its state
    short = list(train_to_budgets(Study(budgets=(2,), every=2, **TINY), source,
                                  tmp_path / "b", log=lambda _: None))
    longer = list(train_to_budgets(study, source, tmp_path / "b", log=lambda _: None))
    assert [b.budget for b in straight] == [b.budget for b in longer] == [2, 4]
    assert short[0].losses.shape == (2, 2)
    for a, b in zip(_leaves(straight[-1].learners), _leaves(longer[-1].learners), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(straight[-1].losses, longer[-1].losses)
    np.testing.assert_array_equal(straight[0].losses, longer[-1].losses[:, :2])
    # seed 1 follows make_meta_train's trajectory for seed 1 (as vsml.meta_train starts it)
    init_key, train_key = jax.random.split(jax.random.key(1))
    net = vsml_compute.VSMLNetwork((4, 2), key=init_key)
    _, (losses, _) = make_meta_train(MetaConfig(iterations=4, tasks=1), source)(net, train_key)
    # the same start and tasks; then float rounding (the seeds are vmapped), which Adam's
    # normalised first steps amplify in near-zero gradient entries
    assert straight[-1].losses[1, 0] == pytest.approx(losses[0], rel=1e-6)
    np.testing.assert_allclose(straight[-1].losses[1], losses, atol=2e-3)
    assert not np.allclose(straight[-1].losses[0], losses, atol=2e-3)  # seed 0 is another run


def test_train_to_budgets_refuses_another_configuration(tmp_path):
    study = Study(budgets=(1,), **TINY)
    source = vsml_compute.sources(study).train
    list(train_to_budgets(study, source, tmp_path, log=lambda _: None))
    other = Study(budgets=(1,), lr=1e-2, **TINY)
    with pytest.raises(ValueError, match="different config"):
        list(train_to_budgets(other, source, tmp_path, log=lambda _: None))


def test_xla_flops_counts_every_iteration_of_a_scan():
    def f(x):
        return jax.lax.scan(lambda c, _: (c @ c, None), x, None, length=5)[0]

    x = jnp.ones((8, 8))
    assert xla_flops(f, x) == 5 * 2 * 8**3
    plain = jax.jit(f).lower(x).compile().cost_analysis()
    plain = plain[0] if isinstance(plain, list | tuple) else plain
    assert plain["flops"] < 5 * 2 * 8**3  # XLA alone counts the loop body once


def test_meta_iteration_flops_is_the_unrolled_count_at_the_episode_length():
    study = Study(method="es", population=2, **TINY)
    source = vsml_compute.sources(study).train  # 3-step episodes
    net = vsml_compute.VSMLNetwork((4, 2), key=jax.random.key(0))
    config = MetaConfig(method="es", iterations=1, tasks=1, population=2)
    unrolled = vsml_compute._one_iteration_flops(config, source, net)  # all 3 steps
    extrapolated = vsml_compute.meta_iteration_flops(config, source, net)  # from 1 and 2
    assert extrapolated == pytest.approx(unrolled, rel=1e-2)
    one_step = vsml_compute._one_iteration_flops(config, vsml_compute._with_steps(source, 1), net)
    assert unrolled - one_step > 0.1 * one_step  # the steps beyond the first are counted


def test_gap_against_the_best_baseline():
    baselines = {"sgd_linear": 0.85, "adam_linear": 0.82, "sgd_hidden": 0.5}
    out = gap([0.80, 0.90], baselines)
    assert out["best_baseline"] == "sgd_linear"
    np.testing.assert_allclose(out["gap"], [-0.05, 0.05])
    assert out["gap_mean"] == pytest.approx(0.0, abs=1e-12)
    assert out["gap_std"] == pytest.approx(0.05)
    assert out["verdict"] == "mixed"
    assert gap([0.86, 0.9], baselines)["verdict"] == "ahead"
    assert gap([0.84, 0.7], baselines)["verdict"] == "behind"


def test_study_validates_budgets_and_dataset():
    with pytest.raises(ValueError, match="increasing"):
        Study(budgets=(4, 2))
    with pytest.raises(ValueError, match="unknown dataset"):
        Study(dataset="cifar10")
    assert Study(budgets=(375, 1500, 6000)).chunk == 375
