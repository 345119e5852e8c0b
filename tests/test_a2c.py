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
    # each of the 4 games steps 4 x 3 = 12 times and an episode lasts at most 6 steps: at
    # least 2 episodes end in every game (a counter that misses an end breaks this)
    assert 8 <= int(m.episodes.sum()) <= 48
    returns = np.asarray(m.episode_return)
    assert np.all(np.isnan(returns) | ((returns >= 0) & (returns <= 6)))  # a brick a step at most
    assert np.isfinite(np.nanmean(returns))
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


def test_a_run_trains_with_its_own_step_size_and_discount():
    """``with_hyper`` on a default run equals a run made with those settings; vmapped over
    configurations, each trains as it would alone."""
    from lab.train.a2c import Hyper, with_hyper

    mine = Hyper(learning_rate=1e-3, gamma=0.9)
    init_a, run_a = make_train(A2CConfig(envs=2, t_max=3, hyper=mine), TASK)
    init_b, run_b = make_train(A2CConfig(envs=2, t_max=3), TASK)
    key = jax.random.key(2)
    alone = jax.jit(lambda k: run_a(init_a(k), 3)[0])(key)
    changed = jax.jit(lambda k: run_b(with_hyper(init_b(k), 1e-3, 0.9), 3)[0])(key)
    assert np.allclose(np.concatenate([x.ravel() for x in arrays(alone.model)]),
                       np.concatenate([x.ravel() for x in arrays(changed.model)]), atol=1e-6)

    lrs, gammas = np.array([1e-3, 3e-4]), np.array([0.9, 0.99])
    both = jax.jit(jax.vmap(lambda lr, g: run_b(with_hyper(init_b(key), lr, g), 3)[0]))(
        lrs, gammas)
    first = jax.tree.map(lambda x: x[0], eqx.filter(both.model, eqx.is_array))
    assert np.allclose(np.concatenate([x.ravel() for x in arrays(alone.model)]),
                       np.concatenate([np.ravel(x) for x in jax.tree.leaves(first)]),
                       atol=1e-6)
    assert both.learning_rate[1] == np.float32(3e-4) and both.gamma[1] == np.float32(0.99)
