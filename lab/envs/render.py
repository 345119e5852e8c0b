"""Anti-aliased 2-D drawing with signed-distance functions over a pixel grid, in pure JAX.

A scene is drawn by painting layers back to front onto a float RGB canvas in ``[0, 1]``:
each layer is a shape's signed distance ``d`` (negative inside) evaluated at every pixel
centre at once, turned into a coverage ``clip(0.5 - d / pixel, 0, 1)`` (one pixel of soft
edge), and blended over the canvas. No Python loop runs over pixels; every function is jit-
and vmap-able. World coordinates have ``y`` pointing up; image row 0 is the top.
"""

import jax.numpy as jnp

SKY_TOP = (0.45, 0.62, 0.85)
SKY_BOTTOM = (0.80, 0.88, 0.95)
GROUND = (0.36, 0.30, 0.24)
GROUND_STRIPE = (0.46, 0.40, 0.32)
MIN_IMAGE_SIZE = 16


def pixel_grid(size: int, center: tuple[float, float], half_extent: float):
    """World ``(x, y)`` of each pixel centre of a ``size x size`` view, and one pixel's width.

    The view is the square ``center +- half_extent``; both arrays have shape ``(size, size)``.
    """
    pixel = 2.0 * half_extent / size
    offsets = (jnp.arange(size, dtype=jnp.float32) + 0.5) * pixel - half_extent
    xs, ys = jnp.meshgrid(center[0] + offsets, center[1] - offsets)
    return xs, ys, pixel


def circle_sdf(xs, ys, center, radius):
    """Signed distance to a disc."""
    return jnp.hypot(xs - center[0], ys - center[1]) - radius


def segment_sdf(xs, ys, a, b, radius):
    """Signed distance to a capsule: the segment ``a -> b`` thickened by ``radius``."""
    abx, aby = b[0] - a[0], b[1] - a[1]
    apx, apy = xs - a[0], ys - a[1]
    h = jnp.clip((apx * abx + apy * aby) / (abx**2 + aby**2 + 1e-12), 0.0, 1.0)
    return jnp.hypot(apx - h * abx, apy - h * aby) - radius


def box_sdf(xs, ys, center, half_size):
    """Signed distance to an axis-aligned box with half widths ``half_size``."""
    qx = jnp.abs(xs - center[0]) - half_size[0]
    qy = jnp.abs(ys - center[1]) - half_size[1]
    outside = jnp.hypot(jnp.maximum(qx, 0.0), jnp.maximum(qy, 0.0))
    return outside + jnp.minimum(jnp.maximum(qx, qy), 0.0)


def coverage(sdf, pixel):
    """Fraction of a pixel inside a shape, from its signed distance (one-pixel soft edge)."""
    return jnp.clip(0.5 - sdf / pixel, 0.0, 1.0)


def paint(canvas, cover, color):
    """Blend ``color`` over the ``(H, W, 3)`` canvas with per-pixel opacity ``cover``."""
    cover = cover[..., None]
    return canvas * (1.0 - cover) + cover * jnp.asarray(color, jnp.float32)


def background(xs, ys, pixel, horizon: float, stripe: float):
    """Sky with a vertical gradient above ``horizon``; ground with vertical stripes every
    ``stripe`` world units below it, so sideways motion is visible against a fixed reference.
    """
    top, bottom = ys.max(), ys.min()
    level = ((ys - bottom) / (top - bottom))[..., None]
    canvas = (1.0 - level) * jnp.asarray(SKY_BOTTOM) + level * jnp.asarray(SKY_TOP)
    canvas = paint(canvas, coverage(ys - horizon, pixel), GROUND)
    phase = jnp.abs(jnp.mod(xs / stripe, 1.0) - 0.5) * stripe  # distance to a stripe centre
    stripes = coverage(jnp.maximum(phase - 0.12 * stripe, ys - horizon), pixel)
    return paint(canvas, stripes, GROUND_STRIPE)


def to_uint8(canvas):
    """A ``[0, 1]`` float canvas as ``uint8`` RGB."""
    return jnp.round(jnp.clip(canvas, 0.0, 1.0) * 255.0).astype(jnp.uint8)


def check_sizes(image_size, action_repeat, physics_steps):
    """Raise a one-line ``ValueError`` for a frame below ``MIN_IMAGE_SIZE`` pixels or an
    ``action_repeat`` outside ``[1, physics_steps]``."""
    if not isinstance(image_size, int) or image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be an integer >= {MIN_IMAGE_SIZE}, got {image_size!r}")
    if not isinstance(action_repeat, int) or not 1 <= action_repeat <= physics_steps:
        raise ValueError(
            f"action_repeat must be an integer in [1, {physics_steps}], got {action_repeat!r}")
