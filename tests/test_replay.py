"""The frame replay buffer: stacking by index, episode boundaries, wrap-around, memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.train import replay as replays

H = W = 4


def _frame(episode: int, t: int):
    """A frame whose pixels encode (episode, t): channel 0 = episode, channel 1 = t."""
    return jnp.zeros((H, W, 3), jnp.uint8).at[..., 0].set(episode).at[..., 1].set(t)


def _fill(capacity: int, episodes: int, length: int) -> replays.Replay:
    replay = replays.init(capacity, (H, W, 3), action_size=1)
    for e in range(episodes):
        replay = replays.start_episode(replay, _frame(e, 0))
        for t in range(1, length + 1):
            replay = replays.add_step(replay, jnp.array([t / 10]), jnp.float32(t), 1.0,
                                      _frame(e, t))
    return replay


def _decode(obs):
    """(..., H, W, 3 F) -> per stacked frame (episode, t), oldest first."""
    frames = np.asarray(obs)[..., 0, 0, :].reshape(*obs.shape[:-3], -1, 3)
    return frames[..., 0], frames[..., 1]


def test_stack_repeats_the_first_frame_of_an_episode():
    replay = _fill(capacity=32, episodes=2, length=5)
    # absolute time 6 is episode 1's first frame, 7 its second
    episode, t = _decode(replays.stacked(replay, jnp.int32(7), replay.start[7], 3))
    assert episode.tolist() == [1, 1, 1] and t.tolist() == [0, 0, 1]
    episode, t = _decode(replays.stacked(replay, jnp.int32(10), replay.start[10], 3))
    assert t.tolist() == [2, 3, 4]
    episode, t = _decode(replays.latest(replay, 3))
    assert episode.tolist() == [1, 1, 1] and t.tolist() == [3, 4, 5]


def test_samples_are_consecutive_stacks_of_one_episode_after_wrap_around():
    replay = _fill(capacity=20, episodes=5, length=6)  # 35 frames written into 20 slots
    assert int(replay.count) == 35
    batch = replays.sample(replay, jax.random.key(0), 256, 3)
    episode, t = _decode(batch.obs)
    next_episode, next_t = _decode(batch.next_obs)
    assert (episode == episode[:, :1]).all() and (next_episode == episode).all()
    assert (next_t[:, -1] == t[:, -1] + 1).all()  # the next frame follows
    np.testing.assert_allclose(batch.reward, next_t[:, -1])  # reward t was stored with step t
    np.testing.assert_allclose(batch.action[:, 0], next_t[:, -1] / 10, rtol=1e-6)
    # never a frame that was overwritten (absolute time < 35 - 20 = 15) nor a terminal frame
    absolute = episode * 7 + t
    assert absolute.min() >= 15 and (t[:, -1] < 6).all()
    # every stack is the clamped history: oldest frame first, repeating t = 0 at the start
    assert (np.diff(t, axis=1) >= 0).all() and (t[:, -1] - t[:, 0] <= 2).all()


def test_valid_counts_exclude_terminal_and_overwritten_history():
    replay = _fill(capacity=64, episodes=2, length=5)
    assert int(replays.num_valid(replay, 3)) == 10  # 5 transitions per episode
    wrapped = _fill(capacity=8, episodes=2, length=5)  # frames 4..11 kept
    # kept: episode 0 t=4..5 (absolute 4, 5; 5 is terminal), episode 1 t=0..5 (6..11)
    assert int(replays.num_valid(wrapped, 1)) == 6  # t=4 of episode 0, t=0..4 of episode 1
    assert int(replays.num_valid(wrapped, 3)) == 5  # t=4 of episode 0 needs frames 2 and 3


def test_memory_is_at_least_5x_below_the_reference():
    capacity = 1000
    per_transition = replays.nbytes(replays.init(capacity, (84, 84, 3), 6)) / capacity
    reference = 2 * 9 * 84 * 84 + 4 * (6 + 2)  # obs + next_obs uint8, action/reward/not_done
    assert reference / per_transition >= 5.0, (reference, per_transition)


def test_a_batch_larger_than_the_stored_transitions_is_refused():
    replay = _fill(capacity=64, episodes=1, length=5)
    replays.check_can_sample(replay, 5, 3)
    with pytest.raises(ValueError, match="batch size 6 is larger than the 5 transitions"):
        replays.check_can_sample(replay, 6, 3)
