"""The matmul convolutions against XLA's own (NHWC / HWIO) and against their adjoint; the flat
draw of initial weights against jax.random.normal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models.conv import Conv2d, ConvTranspose2d, conv2d, conv_transpose2d

DN = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("shape,stride", [((9, 9), 1), ((17, 12), 2), ((16, 16), 2)])
def test_conv2d_equals_lax_conv(shape, stride):
    k_x, k_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(k_x, (*shape, 4))
    w = jax.random.normal(k_w, (3, 3, 4, 5))
    expected = jax.lax.conv_general_dilated(x[None], w, (stride, stride), "VALID",
                                            dimension_numbers=DN)[0]
    np.testing.assert_allclose(conv2d(x, w, stride), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,stride", [((9, 9), 1), ((17, 12), 2), ((16, 16), 2)])
def test_conv_transpose2d_is_the_adjoint_of_conv2d(shape, stride):
    """<conv(x), y> = <x, conv_T(y)>: the transposed conv is conv2d's vjp in the input."""
    k_x, k_w, k_y = jax.random.split(jax.random.key(1), 3)
    x = jax.random.normal(k_x, (*shape, 4))
    w = jax.random.normal(k_w, (3, 3, 4, 5))
    y = jax.random.normal(k_y, conv2d(x, w, stride).shape)
    # the output padding that restores x's size (stride 2 loses one row for even sizes)
    pad = tuple(s - (stride * (o - 1) + 3) for s, o in zip(shape, y.shape[:2], strict=True))
    back = conv_transpose2d(y, jnp.swapaxes(w, 2, 3), stride, pad)
    assert back.shape == x.shape
    _, vjp = jax.vjp(lambda x: conv2d(x, w, stride), x)
    np.testing.assert_allclose(back, vjp(y)[0], rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_equals_lax_conv_transpose():
    k_x, k_w = jax.random.split(jax.random.key(2))
    x = jax.random.normal(k_x, (7, 7, 3))
    w = jax.random.normal(k_w, (3, 3, 3, 2))
    # lax.conv_transpose with transpose_kernel=True is the gradient form (PyTorch's)
    expected = jax.lax.conv_transpose(x[None], jnp.swapaxes(w, 2, 3), (2, 2), "VALID",
                                      dimension_numbers=DN, transpose_kernel=True)[0]
    np.testing.assert_allclose(conv_transpose2d(x, w, 2), expected, rtol=1e-5, atol=1e-5)


def test_layers_shapes_and_bad_output_padding():
    conv = Conv2d(9, 32, 3, stride=2, key=jax.random.key(0))
    assert conv(jnp.zeros((84, 84, 9))).shape == (41, 41, 32)
    deconv = ConvTranspose2d(32, 9, 3, stride=2, output_padding=1, key=jax.random.key(0))
    assert deconv(jnp.zeros((41, 41, 32))).shape == (84, 84, 9)
    with pytest.raises(ValueError, match="output_padding"):
        ConvTranspose2d(32, 9, 3, stride=1, output_padding=1, key=jax.random.key(0))


def test_flat_normal_draw_is_jax_random_normal_bit_for_bit():
    """``lab.models.init.normal`` (a flat draw, reshaped: it compiles once per element count)
    gives exactly ``jax.random.normal``'s numbers, so initial weights are unchanged by it."""
    from lab.models.init import normal

    key = jax.random.key(11)
    for shape in [(3, 3, 4, 5), (6, 10), (2, 1, 7)]:
        np.testing.assert_array_equal(normal(key, shape), jax.random.normal(key, shape))
