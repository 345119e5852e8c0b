"""The actor-critic networks of GA3C and A3C: a conv torso, a dense layer, policy and value.

- ``torso="atari"``: the A3C / GA3C Atari network (Mnih et al. 2016; Babaeizadeh et al.
  2017) on 84x84 frames, 4 stacked: conv 16 8x8 stride 4, conv 32 4x4 stride 2, dense 256;
- ``torso="minatar"``: MinAtar's network (Young & Tian 2019) on its 10x10 grids: conv 16 3x3
  stride 1, dense 128.

ReLU after every hidden layer; a linear policy head (logits over the actions) and a linear
value head. One example per call, ``(H, W, C)`` channels-last; batch with ``jax.vmap``.
The convolutions are ``lab.models.conv``'s (fast inside ``lax.scan`` on XLA's CPU).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.conv import Conv2d

TORSOS = {  # name -> ((out channels, kernel, stride) per conv, dense width)
    "atari": (((16, 8, 4), (32, 4, 2)), 256),
    "minatar": (((16, 3, 1),), 128),
}


class ActorCritic(eqx.Module):
    """``obs (H, W, C) -> (logits (A,), value ())``."""

    convs: list[Conv2d]
    dense: eqx.nn.Linear
    policy: eqx.nn.Linear
    value: eqx.nn.Linear

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int,
                 torso: str = "minatar", *, key: jax.Array):
        if torso not in TORSOS:
            raise ValueError(f"unknown torso {torso!r}; choose one of {', '.join(TORSOS)}")
        convs, width = TORSOS[torso]
        k_convs, k_dense, k_pi, k_v = jax.random.split(key, 4)
        (h, w, c), self.convs = obs_shape, []
        for (out, kernel, stride), k in zip(convs, jax.random.split(k_convs, len(convs)),
                                            strict=True):
            if min(h, w) < kernel:
                raise ValueError(f"observations of {obs_shape} are too small for the "
                                 f"{torso} torso; use the torso made for them")
            self.convs.append(Conv2d(c, out, kernel, stride, key=k))
            h, w, c = (h - kernel) // stride + 1, (w - kernel) // stride + 1, out
        self.dense = eqx.nn.Linear(h * w * c, width, key=k_dense)
        self.policy = eqx.nn.Linear(width, num_actions, key=k_pi)
        self.value = eqx.nn.Linear(width, "scalar", key=k_v)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        x = jax.nn.relu(self.dense(jnp.ravel(x)))
        return self.policy(x), self.value(x)
