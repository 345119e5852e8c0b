"""SAC-AE networks (Yarats et al. 2019, "Improving Sample Efficiency in Model-Free
Reinforcement Learning from Images", arXiv:1910.01741), as the reference code builds them.

Conventions: observations are channels-last uint8 ``(H, W, C)`` (C = 9 for three stacked
RGB frames, oldest first); the trunk divides by 255. Every module takes ONE example; batch
with ``jax.vmap``. The convs are ``lab.models.conv`` layers (patches times a matrix), which
keep full speed inside the jitted training loop on CPU, where XLA's own convolution gradients
do not (see that module). The reference is channels-first; the layout changes only the order
in which the Linear after the trunk reads the flattened features.

- ``ConvTrunk``: a 3x3 stride-2 conv, then ``num_layers - 1`` 3x3 stride-1 convs, no padding,
  ReLU after each (84 -> 41 -> 39 -> 37 -> 35 with 4 layers). It is shared: the critic owns
  it, the actor reads it through ``stop_gradient`` (the reference ties the conv weights).
- ``EncoderHead``: flatten, Linear to ``features_dim``, LayerNorm, tanh. The critic and the
  actor have one each.
- ``Decoder``: Linear + ReLU, reshape, ``num_layers - 1`` 3x3 stride-1 transposed convs with
  ReLU, a final 3x3 stride-2 transposed conv with no activation. Its output padding is
  chosen so that the output has the input's size (1 for even sizes as in the reference,
  0 for odd ones).
- ``Actor``: its own ``EncoderHead`` on the (detached) conv features, a ``ReluMLP``, and the
  mean and log-std of a tanh-squashed Gaussian, the log-std squashed into ``[min, max]``.
- ``Critic``: ``Encoder`` (trunk + head) and two Q MLPs on ``[features, action]``.

The constructors give Equinox's default init; ``orthogonal_init(model, key=...)`` turns it into
the reference's (``lab.train.sac_ae.init`` applies it): orthogonal Linear weights with zero
bias; delta-orthogonal convs and transposed convs (zeros except the centre tap, orthogonal
with gain sqrt(2)).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.conv import Conv2d, ConvTranspose2d

KERNEL = 3


def min_image_size(num_layers: int) -> int:
    """The smallest height or width the conv stack maps to at least 1x1."""
    return 4 * num_layers - 1


def conv_output_size(size: int, num_layers: int) -> int:
    """Height (or width) after the trunk: one stride-2 conv, then stride-1 convs."""
    return (size - KERNEL) // 2 + 1 - (KERNEL - 1) * (num_layers - 1)


def _check_image(image_shape: tuple[int, int], num_layers: int) -> None:
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    if min(image_shape) < min_image_size(num_layers):
        raise ValueError(f"image size {tuple(image_shape)} is too small for {num_layers} conv "
                         f"layers: the minimum is {min_image_size(num_layers)}")


def _is_layer(x) -> bool:
    return isinstance(x, (eqx.nn.Linear, Conv2d, ConvTranspose2d))


def _layers(model) -> list:
    return [x for x in jax.tree_util.tree_leaves(model, is_leaf=_is_layer) if _is_layer(x)]


def _init_layer(layer, key: jax.Array):
    if isinstance(layer, eqx.nn.Linear):
        weight = jax.nn.initializers.orthogonal()(key, layer.weight.shape, layer.weight.dtype)
    else:
        kh, kw, in_c, out_c = layer.weight.shape
        centre = jax.nn.initializers.orthogonal(math.sqrt(2.0))(key, (in_c, out_c),
                                                                layer.weight.dtype)
        weight = jnp.zeros_like(layer.weight).at[kh // 2, kw // 2].set(centre)
    return eqx.tree_at(lambda lay: (lay.weight, lay.bias), layer,
                       (weight, jnp.zeros_like(layer.bias)))


def orthogonal_init(model, *, key: jax.Array):
    """``model`` with every Linear orthogonal (bias 0) and every conv / transposed conv
    delta-orthogonal with ReLU gain sqrt(2) (bias 0): the reference's ``weight_init``."""
    layers = _layers(model)
    keys = jax.random.split(key, len(layers))
    new = [_init_layer(lay, k) for lay, k in zip(layers, keys, strict=True)]
    return eqx.tree_at(_layers, model, new)


class ReluMLP(eqx.Module):
    """Linear layers with ReLU between them (none after the last). Takes a vector."""

    layers: tuple[eqx.nn.Linear, ...]

    def __init__(self, sizes: tuple[int, ...], *, key: jax.Array):
        keys = jax.random.split(key, len(sizes) - 1)
        self.layers = tuple(eqx.nn.Linear(a, b, key=k)
                            for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True))

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


class ConvTrunk(eqx.Module):
    """uint8 ``(H, W, C)`` -> float ``(h, w, num_filters)`` conv features."""

    convs: tuple[Conv2d, ...]

    def __init__(self, in_channels: int, image_shape: tuple[int, int], num_filters: int = 32,
                 num_layers: int = 4, *, key: jax.Array):
        _check_image(image_shape, num_layers)
        keys = jax.random.split(key, num_layers)
        channels = [in_channels] + [num_filters] * num_layers
        self.convs = tuple(
            Conv2d(channels[i], channels[i + 1], KERNEL, stride=2 if i == 0 else 1,
                   key=keys[i])
            for i in range(num_layers))

    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32) / 255.0
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return x


class EncoderHead(eqx.Module):
    """Conv features -> flatten -> Linear -> LayerNorm -> tanh, a ``features_dim`` vector."""

    linear: eqx.nn.Linear
    norm: eqx.nn.LayerNorm

    def __init__(self, in_features: int, features_dim: int = 50, *, key: jax.Array):
        self.linear = eqx.nn.Linear(in_features, features_dim, key=key)
        self.norm = eqx.nn.LayerNorm(features_dim)

    def __call__(self, conv: jax.Array) -> jax.Array:
        return jnp.tanh(self.norm(self.linear(jnp.ravel(conv))))


class Encoder(eqx.Module):
    """The critic's pixel encoder: ``ConvTrunk`` then ``EncoderHead``."""

    trunk: ConvTrunk
    head: EncoderHead

    def __init__(self, obs_shape: tuple[int, int, int], features_dim: int = 50,
                 num_filters: int = 32, num_layers: int = 4, *, key: jax.Array):
        k_trunk, k_head = jax.random.split(key)
        h, w, c = obs_shape
        self.trunk = ConvTrunk(c, (h, w), num_filters, num_layers, key=k_trunk)
        size = num_filters * conv_output_size(h, num_layers) * conv_output_size(w, num_layers)
        self.head = EncoderHead(size, features_dim, key=k_head)

    def __call__(self, obs: jax.Array) -> jax.Array:
        return self.head(self.trunk(obs))


class Decoder(eqx.Module):
    """``features_dim`` vector -> ``(H, W, C)`` reconstruction (no output activation)."""

    linear: eqx.nn.Linear
    deconvs: tuple[ConvTranspose2d, ...]
    conv_shape: tuple[int, int, int] = eqx.field(static=True)

    def __init__(self, obs_shape: tuple[int, int, int], features_dim: int = 50,
                 num_filters: int = 32, num_layers: int = 4, *, key: jax.Array):
        h, w, c = obs_shape
        _check_image((h, w), num_layers)
        self.conv_shape = (conv_output_size(h, num_layers), conv_output_size(w, num_layers),
                           num_filters)
        keys = jax.random.split(key, num_layers + 1)
        self.linear = eqx.nn.Linear(features_dim, math.prod(self.conv_shape), key=keys[0])
        # the stride-2 conv maps s to s1 = (s - 3) // 2 + 1; a stride-2 transposed conv maps
        # s1 back to 2 * s1 + 1 + output_padding, so output_padding = s - 2 * s1 - 1 (0 or 1).
        pad = tuple(s - 2 * ((s - KERNEL) // 2 + 1) - 1 for s in (h, w))
        self.deconvs = tuple(
            ConvTranspose2d(num_filters, num_filters, KERNEL, key=keys[i + 1])
            for i in range(num_layers - 1)
        ) + (ConvTranspose2d(num_filters, c, KERNEL, stride=2, output_padding=pad,
                             key=keys[-1]),)

    def __call__(self, features: jax.Array) -> jax.Array:
        x = jax.nn.relu(self.linear(features)).reshape(self.conv_shape)
        for deconv in self.deconvs[:-1]:
            x = jax.nn.relu(deconv(x))
        return self.deconvs[-1](x)


class Actor(eqx.Module):
    """Detached conv features -> (mean, log_std) of the pre-tanh Gaussian; the log-std is
    ``tanh``-rescaled into ``[log_std_min, log_std_max]``."""

    head: EncoderHead
    mlp: ReluMLP
    log_std_min: float = eqx.field(static=True)
    log_std_max: float = eqx.field(static=True)

    def __init__(self, conv_size: int, action_dim: int, features_dim: int = 50,
                 hidden_dim: int = 1024, log_std_min: float = -10.0, log_std_max: float = 2.0,
                 *, key: jax.Array):
        k_head, k_mlp = jax.random.split(key)
        self.head = EncoderHead(conv_size, features_dim, key=k_head)
        self.mlp = ReluMLP((features_dim, hidden_dim, hidden_dim, 2 * action_dim), key=k_mlp)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def __call__(self, conv: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, raw = jnp.split(self.mlp(self.head(conv)), 2)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (
            jnp.tanh(raw) + 1.0)
        return mean, log_std


class Critic(eqx.Module):
    """Pixels and an action -> two Q values (scalars) through a shared ``Encoder``."""

    encoder: Encoder
    q1: ReluMLP
    q2: ReluMLP

    def __init__(self, obs_shape: tuple[int, int, int], action_dim: int,
                 features_dim: int = 50, hidden_dim: int = 1024, num_filters: int = 32,
                 num_layers: int = 4, *, key: jax.Array):
        k_enc, k_q1, k_q2 = jax.random.split(key, 3)
        self.encoder = Encoder(obs_shape, features_dim, num_filters, num_layers, key=k_enc)
        sizes = (features_dim + action_dim, hidden_dim, hidden_dim, 1)
        self.q1 = ReluMLP(sizes, key=k_q1)
        self.q2 = ReluMLP(sizes, key=k_q2)

    def q_values(self, conv: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Q values from conv-trunk features (pass them through ``stop_gradient`` to detach
        the trunk, as the actor loss does)."""
        x = jnp.concatenate([self.encoder.head(conv), action])
        return self.q1(x)[0], self.q2(x)[0]

    def __call__(self, obs: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.q_values(self.encoder.trunk(obs), action)


def tanh_gaussian_log_prob(u: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """log density of ``a = tanh(u)``, ``u ~ N(mean, exp(log_std)^2)`` (diagonal), summed over
    the action: ``log N(u) - sum log(1 - tanh(u)^2)``, the correction in the stable form
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (the reference adds 1e-6 inside
    the log instead)."""
    z = (u - mean) / jnp.exp(log_std)
    gaussian = jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi))
    return gaussian - jnp.sum(2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u)))


def tanh_gaussian_sample(mean: jax.Array, log_std: jax.Array,
                         key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A reparameterised action ``tanh(mean + std * eps)`` and its log-probability."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    return jnp.tanh(u), tanh_gaussian_log_prob(u, mean, log_std)
