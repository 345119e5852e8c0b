"""Feed-forward networks as ``eqx.nn.Sequential``: the layer list ProxProp walks.

Every layer is an ``eqx.nn.Linear``, an ``eqx.nn.Conv2d``, a pooling layer or an
``eqx.nn.Lambda`` wrapping an elementwise activation or a reshape, so that each
parameterised layer's input and output can be tapped (see ``lab.optim.proxprop``).
"""

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp


def mlp(sizes: Sequence[int], *, activation: Callable = jax.nn.relu,
        key: jax.Array) -> eqx.nn.Sequential:
    """Linear layers of the given sizes (input first, classes last) with ``activation``
    between them. Takes a flat vector; ``mlp([3072, 4000, 1000, 4000, 10], key=k)`` is the
    ProxProp paper's CIFAR-10 network."""
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"mlp needs at least an input and an output size >= 1, got {sizes}")
    keys = jax.random.split(key, len(sizes) - 1)
    layers: list = [eqx.nn.Lambda(jnp.ravel)]
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(eqx.nn.Linear(n_in, n_out, key=keys[i]))
        if i < len(sizes) - 2:
            layers.append(eqx.nn.Lambda(activation))
    return eqx.nn.Sequential(layers)


def convnet(in_channels: int, image_size: int, classes: int,
            channels: Sequence[int] = (16, 20, 20), *, kernel_size: int = 5,
            pool_after: int = 2, key: jax.Array) -> eqx.nn.Sequential:
    """Convolutions (``kernel_size``, 'same' padding, ReLU), a 2x2 max-pool after each of
    the first ``pool_after``, then one Linear layer. The defaults on 32x32x3 inputs are the
    ProxProp paper's ConvNet (16, 20, 20 channels, Linear 1280 -> 10). Takes (C, H, W)."""
    keys = jax.random.split(key, len(channels) + 1)
    layers: list = []
    size, c_in = image_size, in_channels
    for i, c_out in enumerate(channels):
        layers += [eqx.nn.Conv2d(c_in, c_out, kernel_size, padding=kernel_size // 2,
                                 key=keys[i]), eqx.nn.Lambda(jax.nn.relu)]
        if i < pool_after:
            layers.append(eqx.nn.MaxPool2d(2, 2))
            size //= 2
        c_in = c_out
    if size < 1:
        raise ValueError(f"image_size {image_size} is too small for {pool_after} poolings")
    layers += [eqx.nn.Lambda(jnp.ravel), eqx.nn.Linear(c_in * size * size, classes, key=keys[-1])]
    return eqx.nn.Sequential(layers)
