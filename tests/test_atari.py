"""Real Atari through ale-py with the standard preprocessing (``lab.envs.atari``), and GA3C and
A3C stepping it with the Atari torso (the ``gpu_atari`` preset, at toy size)."""

import dataclasses
import threading

import jax
import numpy as np
import pytest

from lab.envs.atari import AtariGame, HostAtari
from lab.train.a2c import Hyper
from lab.train.ga3c import GA3CConfig, run_a3c, run_ga3c


def test_frames_are_84x84_grey_in_unit_range_four_stacked_channels_last():
    env = HostAtari("breakout", seed=0)
    obs = env.reset()
    assert obs.shape == (84, 84, 4) and obs.dtype == np.float32
    assert 0.0 <= obs.min() and obs.max() <= 1.0 and obs.max() > 0.0
    nxt, step = env.step(1)  # FIRE
    # the stack shifts by one frame: the newest three of the old are the oldest three now
    np.testing.assert_array_equal(nxt[..., :3], obs[..., 1:])
    assert step.final_obs.shape == (84, 84, 4) and step.action == 1


def test_minimal_action_sets_and_bad_games():
    assert AtariGame("pong").num_actions == 6 and AtariGame("breakout").num_actions == 4
    assert AtariGame("pong").obs_shape == (84, 84, 4)
    with pytest.raises(ValueError, match="unknown Atari game 'pongg'; ale-py bundles"):
        AtariGame("pongg")
    with pytest.raises(ValueError, match=r"sticky must be in \[0, 1\), got 1.5"):
        AtariGame("pong", sticky=1.5)


def test_time_limit_truncates_and_auto_resets_with_the_final_observation():
    env = HostAtari("pong", max_steps=3, seed=0)  # Pong never ends in 3 steps by itself
    env.reset()
    steps = [env.step(0) for _ in range(3)]
    assert [s.truncated for _, s in steps] == [False, False, True]
    assert not any(s.terminated for _, s in steps)
    assert env.episodes == 2  # the truncation reset the game
    obs, last = steps[-1]
    np.testing.assert_array_equal(last.final_obs[..., :3], steps[-2][0][..., 1:])


def test_a_seed_repeats_its_episodes():
    def first_frames(seed):
        env = HostAtari("breakout", max_steps=1, seed=seed)
        out = [env.reset()]
        out += [env.step(0)[0] for _ in range(3)]  # each step ends an episode: new reset
        return np.stack(out)

    a, b = first_frames(0), first_frames(0)
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_ga3c_and_a3c_step_atari_with_the_atari_torso():
    before = threading.active_count()
    config = GA3CConfig(game="pong", suite="atari", agents=2, t_max=5, prediction_batch=2,
                        training_batch=10, hyper=Hyper(torso="atari"))
    assert config.task.obs_shape == (84, 84, 4) and config.task.num_actions == 6
    r = run_ga3c(config, jax.random.key(0), env_steps=60)
    assert r.env_steps >= 60 and r.trainings >= 1 and r.predictions >= r.env_steps
    a = run_a3c(dataclasses.replace(config, agents=1), jax.random.key(0), env_steps=20)
    assert a.env_steps >= 20 and a.trainings >= 1
    assert threading.active_count() == before


def test_gpu_atari_preset_configures_the_atari_suite_without_the_jitted_a2c():
    from lab.experiments.ga3c import configure
    from tests.test_ga3c import NOTEBOOK

    setup = configure(**(NOTEBOOK | {"preset": "gpu_atari", "game": "pong"}))
    assert setup.host.suite == "atari" and setup.host.game == "pong"
    assert setup.host.hyper.torso == "atari" and setup.executions == ("ga3c", "a3c")
    assert setup.lags == ()
    with pytest.raises(ValueError, match="unknown Atari game 'pongg'"):
        configure(**(NOTEBOOK | {"suite": "atari", "game": "pongg"}))


def test_gpu_preset_is_gpu_atari_in_units_an_8_minute_window_can_finish():
    """`--preset gpu` runs in `--time-limit 480 --resume` windows: the kernel is stopped 96 s
    early and a window keeps only whole runs, so every run is at most 240 s and kept."""
    from lab.experiments.ga3c import PRESETS, configure
    from tests.test_ga3c import NOTEBOOK

    setup = configure(**(NOTEBOOK | {"preset": "gpu"}))
    assert setup.host.suite == "atari" and setup.checkpoint
    longest = max(setup.seconds, setup.adjust_seconds, setup.throughput_seconds,
                  setup.adjust.initial_wait + setup.adjust.step_wait)
    assert longest <= 240
    assert PRESETS["gpu"] == PRESETS["gpu_atari"] | {"seconds": 240.0, "adjust_seconds": 240.0}
