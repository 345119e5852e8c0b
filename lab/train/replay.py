"""A replay buffer of single uint8 frames that stacks observations by index.

The SAC-AE reference stores every transition's stacked observation and next observation:
2 x 9 x 84 x 84 bytes = 127 kB per transition. Consecutive stacks share all but one frame,
so this buffer stores each rendered frame once, ``(H, W, 3)`` uint8 (21 kB at 84x84, 6x
less), and builds ``obs`` and ``next_obs`` at sampling time by gathering frame
indices (``lab.envs.frames.frame_stack_indices``).

Layout. Slot ``i`` of a circular buffer of ``capacity`` slots holds the frame written at
absolute time ``n`` with ``i = n % capacity``, the absolute time ``start[i]`` where its episode
began, and the transition that leaves it: ``action[i]``, ``reward[i]``, ``not_done[i]`` and
``has_next[i]`` (True once the next frame of the same episode is written). An episode of T
steps fills T + 1 slots (its first frame, then one per step). Transition ``n`` is sampleable
when ``has_next``, when its successor is still stored, and when the oldest frame its stack
needs, ``max(n - num_frames + 1, start)``, has not been overwritten.

Everything is a pure function over the ``Replay`` pytree, so it lives inside ``jit`` and
``lax.scan``. Writing: ``start_episode(replay, frame)`` after a reset, then
``add_step(replay, action, reward, not_done, next_frame)`` after every environment step.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from lab.envs.frames import frame_stack_indices


class Replay(NamedTuple):
    frames: jax.Array
    """``(capacity, H, W, 3)`` uint8, one rendered frame per slot."""
    start: jax.Array
    """``(capacity,)`` int32: absolute time of the first frame of the slot's episode."""
    action: jax.Array
    """``(capacity, A)`` float32: the action taken from the slot's frame."""
    reward: jax.Array
    """``(capacity,)`` float32: the reward of that action."""
    not_done: jax.Array
    """``(capacity,)`` float32: 0 if the next frame is terminal (bootstrapping stops)."""
    has_next: jax.Array
    """``(capacity,)`` bool: the slot's transition is complete (its next frame is stored)."""
    count: jax.Array
    """Frames written so far (int32, absolute time of the next write)."""


def init(capacity: int, frame_shape: tuple[int, int, int], action_size: int) -> Replay:
    """An empty buffer for ``capacity`` frames of shape ``(H, W, 3)``."""
    if capacity < 2:
        raise ValueError(f"replay capacity must be >= 2 frames, got {capacity}")
    return Replay(
        frames=jnp.zeros((capacity, *frame_shape), jnp.uint8),
        start=jnp.zeros((capacity,), jnp.int32),
        action=jnp.zeros((capacity, action_size), jnp.float32),
        reward=jnp.zeros((capacity,), jnp.float32),
        not_done=jnp.zeros((capacity,), jnp.float32),
        has_next=jnp.zeros((capacity,), bool),
        count=jnp.zeros((), jnp.int32))


def capacity(replay: Replay) -> int:
    return replay.frames.shape[0]


def nbytes(replay: Replay) -> int:
    """Bytes held by the buffer's arrays."""
    return sum(x.nbytes for x in jax.tree.leaves(replay))


def _write_frame(replay: Replay, frame: jax.Array, start: jax.Array) -> Replay:
    slot = replay.count % capacity(replay)
    return replay._replace(
        frames=replay.frames.at[slot].set(frame.astype(jnp.uint8)),
        start=replay.start.at[slot].set(start),
        has_next=replay.has_next.at[slot].set(False),
        count=replay.count + 1)


def start_episode(replay: Replay, frame: jax.Array) -> Replay:
    """Store the first ``(H, W, 3)`` frame of a new episode."""
    return _write_frame(replay, frame, replay.count)


def add_step(replay: Replay, action: jax.Array, reward: jax.Array, not_done: jax.Array,
             next_frame: jax.Array) -> Replay:
    """Record the transition from the latest frame and store the frame it led to."""
    slot = (replay.count - 1) % capacity(replay)
    replay = replay._replace(
        action=replay.action.at[slot].set(action),
        reward=replay.reward.at[slot].set(reward),
        not_done=replay.not_done.at[slot].set(not_done),
        has_next=replay.has_next.at[slot].set(True))
    return _write_frame(replay, next_frame, replay.start[slot])


def _absolute_time(replay: Replay) -> jax.Array:
    """``(capacity,)`` absolute time of the frame in each slot (garbage for unwritten ones)."""
    slots = jnp.arange(capacity(replay))
    newest = replay.count - 1
    return newest - (newest - slots) % capacity(replay)


def valid(replay: Replay, num_frames: int) -> jax.Array:
    """``(capacity,)`` bool: the transitions that ``sample`` may draw."""
    n = _absolute_time(replay)
    oldest_stored = jnp.maximum(replay.count - capacity(replay), 0)
    oldest_needed = jnp.maximum(n - num_frames + 1, replay.start)
    return replay.has_next & (n >= 0) & (n + 1 < replay.count) & (
        oldest_needed >= oldest_stored)


def num_valid(replay: Replay, num_frames: int) -> jax.Array:
    """How many transitions ``sample`` can draw from."""
    return jnp.sum(valid(replay, num_frames))


def stacked(replay: Replay, n: jax.Array, start: jax.Array, num_frames: int) -> jax.Array:
    """The ``(H, W, 3 * num_frames)`` observation at absolute time ``n``, oldest frame
    first along the channels."""
    slots = frame_stack_indices(n, start, num_frames) % capacity(replay)
    frames = replay.frames[slots]  # (num_frames, H, W, 3)
    return jnp.moveaxis(frames, 0, 2).reshape(*frames.shape[1:3], -1)


def latest(replay: Replay, num_frames: int) -> jax.Array:
    """The stacked observation ending at the newest frame (what the agent acts on)."""
    n = replay.count - 1
    return stacked(replay, n, replay.start[n % capacity(replay)], num_frames)


class Transitions(NamedTuple):
    """A batch of transitions (``lab.train.sac_ae.Batch``): ``obs``/``next_obs`` uint8
    ``(B, H, W, 3 * num_frames)``; ``action`` ``(B, A)`` in [-1, 1]; ``reward`` and
    ``not_done`` ``(B,)``."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    not_done: jax.Array


def sample(replay: Replay, key: jax.Array, batch_size: int, num_frames: int) -> Transitions:
    """``batch_size`` transitions drawn uniformly with replacement from the valid ones.

    Call it only once ``num_valid(replay, num_frames) > 0`` (``check_can_sample`` says so
    outside jit); the training loops guarantee it by collecting random steps first.
    """
    n_all = _absolute_time(replay)
    slots = jax.random.choice(key, capacity(replay), (batch_size,),
                              p=valid(replay, num_frames).astype(jnp.float32))
    n, start = n_all[slots], replay.start[slots]
    obs = jax.vmap(lambda t, s: stacked(replay, t, s, num_frames))(n, start)
    next_obs = jax.vmap(lambda t, s: stacked(replay, t + 1, s, num_frames))(n, start)
    return Transitions(obs, replay.action[slots], replay.reward[slots], next_obs,
                       replay.not_done[slots])


def check_can_sample(replay: Replay, batch_size: int, num_frames: int) -> None:
    """Raise if the buffer holds fewer stored transitions than ``batch_size`` (outside jit)."""
    stored = int(num_valid(replay, num_frames))
    if batch_size > stored:
        raise ValueError(f"batch size {batch_size} is larger than the {stored} transitions "
                         f"stored; collect more steps first or lower the batch size")
