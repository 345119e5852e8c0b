"""2-D convolutions written as matrix products, channels-last, one example at a time.

Why not ``eqx.nn.Conv2d``: on XLA's CPU backend a convolution's *weight gradient* placed
inside a loop body (``lax.scan``, ``fori_loop``, ``cond``: where a whole RL training loop
lives) runs about 17x slower than the same op at the top level of a jitted function (measured
here for a 3x3, 32-channel layer at batch 128: 520 ms against 31 ms; jax issue #12868 is the
same family). Written as "gather the 3x3 patches (strided slices), then one matmul", the
forward and both gradients are slices, pads and matmuls, which run at full speed anywhere:
the SAC-AE encoder + decoder forward and backward at 32x32, batch 128, take 370 ms in and
out of a loop against 540 ms (top level) and 2.2 s (in a loop) with ``lax.conv``
(``benchmarks/sac_ae.py`` measures it).

Shapes: an input is ``(H, W, C_in)``; a weight is ``(K, K, C_in, C_out)`` (HWIO); batch with
``jax.vmap`` (the slices and the matmul batch cleanly). Padding is always VALID for ``Conv2d``
(as in SAC-AE); ``ConvTranspose2d`` is its exact adjoint shape-wise: ``(h, w) -> (s (h - 1) +
K + output_padding, ...)``.
"""

import equinox as eqx
import jax
import jax.numpy as jnp


def conv2d(x: jax.Array, weight: jax.Array, stride: int = 1) -> jax.Array:
    """VALID cross-correlation: ``out[i, j] = sum_{a, b} x[s i + a, s j + b] @ weight[a, b]``.

    ``x`` ``(H, W, C_in)``, ``weight`` ``(K_h, K_w, C_in, C_out)`` -> ``(H', W', C_out)``
    with ``H' = (H - K_h) // s + 1`` (kernels may be rectangular: PixelCNN's stacks). Equal
    to ``lax.conv_general_dilated`` with NHWC / HWIO.
    """
    k_h, k_w, c_in, c_out = weight.shape
    h, w = (x.shape[0] - k_h) // stride + 1, (x.shape[1] - k_w) // stride + 1
    patches = jnp.concatenate(
        [x[a:a + stride * (h - 1) + 1:stride, b:b + stride * (w - 1) + 1:stride]
         for a in range(k_h) for b in range(k_w)], axis=-1)  # (H', W', K_h K_w C_in), tap-major
    return patches @ weight.reshape(k_h * k_w * c_in, c_out)


def conv_transpose2d(x: jax.Array, weight: jax.Array, stride: int = 1,
                     output_padding: int | tuple[int, int] = 0) -> jax.Array:
    """Transposed convolution: ``out[s i + a, s j + b] += x[i, j] @ weight[a, b]``.

    ``x`` ``(h, w, C_in)``, ``weight`` ``(K, K, C_in, C_out)`` -> ``(s (h - 1) + K + p_h,
    s (w - 1) + K + p_w, C_out)`` (``output_padding`` is ``p`` or ``(p_h, p_w)``). It is the
    adjoint (vjp in the input) of ``conv2d`` with the same weight and stride, and equals
    PyTorch's ``ConvTranspose2d``. Two exact formulations, the faster one for each case:

    - stride 1: a VALID ``conv2d`` of ``x`` zero-padded by ``K - 1`` with the kernel flipped;
    - stride s > 1: one matmul makes every tap's contribution ``x @ weight[a, b]``, each is
      placed on the strided output grid with ``lax.pad`` (interior padding ``s - 1``), and
      the taps are summed (no multiplications by the zeros a dilated input would hold).
    """
    k, _, c_in, c_out = weight.shape
    h, w = x.shape[:2]
    pad_h, pad_w = (output_padding,) * 2 if isinstance(output_padding, int) else output_padding
    if stride == 1:
        padded = jnp.pad(x, ((k - 1, k - 1 + pad_h), (k - 1, k - 1 + pad_w), (0, 0)))
        return conv2d(padded, weight[::-1, ::-1])
    taps = (x @ jnp.moveaxis(weight, 2, 0).reshape(c_in, k * k * c_out)).reshape(
        h, w, k, k, c_out)
    out_h = stride * (h - 1) + k + pad_h
    out_w = stride * (w - 1) + k + pad_w
    out = jnp.zeros((out_h, out_w, c_out), x.dtype)
    for a in range(k):
        for b in range(k):
            out = out + jax.lax.pad(taps[:, :, a, b], jnp.zeros((), x.dtype), [
                (a, out_h - a - stride * (h - 1) - 1, stride - 1),
                (b, out_w - b - stride * (w - 1) - 1, stride - 1),
                (0, 0, 0)])
    return out


class Conv2d(eqx.Module):
    """A VALID conv layer on ``(H, W, C_in)``: ``conv2d(x, weight, stride) + bias``."""

    weight: jax.Array
    bias: jax.Array
    stride: int = eqx.field(static=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, *, key: jax.Array):
        # PyTorch's and Equinox's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound = 1.0 / (in_channels * kernel_size**2) ** 0.5
        k_w, k_b = jax.random.split(key)
        self.weight = jax.random.uniform(
            k_w, (kernel_size, kernel_size, in_channels, out_channels), minval=-bound,
            maxval=bound)
        self.bias = jax.random.uniform(k_b, (out_channels,), minval=-bound, maxval=bound)
        self.stride = stride

    def __call__(self, x: jax.Array) -> jax.Array:
        return conv2d(x, self.weight, self.stride) + self.bias


class ConvTranspose2d(eqx.Module):
    """A transposed conv layer on ``(h, w, C_in)``: ``conv_transpose2d(...) + bias``."""

    weight: jax.Array
    bias: jax.Array
    stride: int = eqx.field(static=True)
    output_padding: tuple[int, int] = eqx.field(static=True)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, output_padding: int | tuple[int, int] = 0, *,
                 key: jax.Array):
        if isinstance(output_padding, int):
            output_padding = (output_padding, output_padding)
        if not all(0 <= p < stride for p in output_padding):
            raise ValueError(f"output_padding must be in [0, stride), got {output_padding} "
                             f"with stride {stride}")
        bound = 1.0 / (out_channels * kernel_size**2) ** 0.5  # PyTorch's fan-in of a deconv
        k_w, k_b = jax.random.split(key)
        self.weight = jax.random.uniform(
            k_w, (kernel_size, kernel_size, in_channels, out_channels), minval=-bound,
            maxval=bound)
        self.bias = jax.random.uniform(k_b, (out_channels,), minval=-bound, maxval=bound)
        self.stride, self.output_padding = stride, tuple(output_padding)

    def __call__(self, x: jax.Array) -> jax.Array:
        return conv_transpose2d(x, self.weight, self.stride, self.output_padding) + self.bias
