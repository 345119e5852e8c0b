"""Frame stacking by index, for replay buffers that store one frame per time step.

The environments return single ``(H, W, 3)`` frames. A pixel agent sees the last
``num_frames`` of them stacked along channels, ``(H, W, 3 * num_frames)``, oldest first. A
replay buffer stores each frame once, with the index where its episode started; the stack for
time ``index`` gathers ``frame_stack_indices(index, episode_start, num_frames)``, which repeats
the episode's first frame where the history is shorter than ``num_frames`` (as dm_control's and
SAC-AE's ``FrameStack`` wrappers do after a reset). For a circular buffer take the indices
modulo its capacity before gathering.
"""

import jax.numpy as jnp


def frame_stack_indices(index, episode_start, num_frames: int):
    """Indices of the frames stacked at ``index``, oldest first, never before ``episode_start``.

    ``frame_stack_indices(5, 4, 3) == [4, 4, 5]``.
    """
    offsets = jnp.arange(num_frames - 1, -1, -1)
    return jnp.maximum(index - offsets, episode_start)


def stack_frames(frames, index, episode_start, num_frames: int):
    """The ``(H, W, 3 * num_frames)`` observation at ``index`` from ``frames`` ``(T, H, W, 3)``."""
    picked = frames[frame_stack_indices(index, episode_start, num_frames)]
    return jnp.concatenate(list(picked), axis=-1)
