"""The jitted A2C: a smoke run, the lag ring's bookkeeping, and refused settings."""

import equinox as eqx
import jax
import numpy as np
import pytest

from lab.envs.minatar import MinAtarTask
from lab.train.a2c import A2CConfig, make_train

TASK = MinAtarTask("breakout", max_steps=6)  # short episodes: some end in every rollout


def arrays(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(arrays(a), arrays(b), strict=True))


def test_a2c_smoke_run_trains_and_reports_episodes():
    config = A2CConfig(envs=4, t_max=3)
    init, run = make_train(config, TASK)
    state = jax.jit(init)(jax.random.key(0))
    state2, m = jax.jit(run, static_argnums=1)(state, 4)
    assert m.loss.shape == (4,) and np.isfinite(np.asarray(m.loss)).all()
    assert int(m.episodes.sum()) >= 4  # 48 steps of 6-step episodes in 4 games
    assert np.isfinite(np.nanmean(np.asarray(m.episode_return)))
    assert not same(state.model, state2.model)  # it learned something
    assert config.steps_per_update == 12


def test_lag_ring_acts_with_the_parameters_of_lag_updates_ago():
    init, run = make_train(A2CConfig(envs=2, t_max=2, lag=2), TASK)
    one = jax.jit(lambda s: run(s, 1)[0])
    state = jax.jit(init)(jax.random.key(1))
    history = [state.model]  # the learner's parameters after 0, 1, 2, ... updates
    for _ in range(5):
        ring_oldest = jax.tree.map(lambda r: r[0], state.ring)
        # before update u the actor uses the parameters after update max(u - 2, 0)
        assert same(ring_oldest, eqx.filter(history[max(len(history) - 3, 0)], eqx.is_array))
        state = one(state)
        history.append(state.model)
    assert same(jax.tree.map(lambda r: r[-1], state.ring), eqx.filter(state.model, eqx.is_array))


@pytest.mark.parametrize("kwargs, message", [
    ({"t_max": 0}, "t_max must be at least 1, got 0"),
    ({"envs": 0}, "envs must be at least 1, got 0"),
    ({"lag": -1}, "lag must be 0 or more updates, got -1"),
])
def test_bad_a2c_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        A2CConfig(**kwargs)
