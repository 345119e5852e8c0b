"""The PixelCNNs: causality (Jacobians), exact normalisation over every image, samplers
against the likelihood (chi-square), evaluation counts, bad input, and training over seeds."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import special, stats

from lab.models.pixelcnn import (
    GROUPS,
    GatedPixelCNN,
    MultiscalePixelCNN,
    check_levels,
    doublings,
    evaluations,
    parameter_count,
    pixel_log_prob,
)
from lab.train.pixelcnn import (
    bits_per_dim,
    make_train,
    receptive_rows,
    sample_multiscale,
    sample_sequential,
    sample_windowed,
)

SMALL = {"base_channels": 4, "base_layers": 2, "channels": 4, "blocks": 1}


def sharpen(model: eqx.Module, factor: float) -> eqx.Module:
    """Every read-out (``head``) scaled by ``factor``: a distribution far from uniform, so
    that a leak, a wrong sampler or a wrong count shows."""
    def heads(m):
        if isinstance(m, GatedPixelCNN):
            return [m.head]
        nets = [n for row in m.groups for n in row]
        nets += [n for row in m.shallow_models or [] for n in row]
        return [m.base_model.head] + [n.head for n in nets]
    return eqx.tree_at(heads, model, replace_fn=lambda w: w * factor)


def every_image(pixels: int) -> np.ndarray:
    """All ``2**pixels`` binary images, flattened, image ``n`` holding ``n``'s bits (most
    significant first)."""
    n = np.arange(2**pixels)
    return ((n[:, None] >> np.arange(pixels - 1, -1, -1)) & 1).astype(np.int32)


def stacked(models: list[eqx.Module]) -> eqx.Module:
    """Models built one by one, stacked over seeds (leading axis)."""
    return jax.tree.map(lambda *a: jnp.stack(a), *models)


def blocks_of(size: int) -> np.ndarray:
    """``(size, size)``: 0 at the coarse pixels (upper-left of each 2x2 block), ``g + 1`` at
    group ``g``'s."""
    label = np.zeros((2, 2), int)
    for g, (r, c) in enumerate(GROUPS):
        label[r, c] = g + 1
    return np.tile(label, (size // 2, size // 2))


# causality -----------------------------------------------------------------------------------

def test_gated_pixelcnn_jacobian_is_strictly_causal_without_blind_spot():
    """d logits(i, j) / d x(i', j') is exactly zero unless (i', j') is strictly before (i, j)
    in raster order, and nonzero for every earlier pixel: 3 layers (first kernel 7, then 3)
    reach 6 rows up and 5 columns either side, the whole 6x6 image (no blind spot)."""
    model = GatedPixelCNN(2, channels=16, layers=3, first_kernel=7, kernel=3,
                          key=jax.random.key(0))
    x = jax.random.uniform(jax.random.key(1), (6, 6))
    jac = np.asarray(jax.jit(jax.jacfwd(lambda x: model(x)[..., 0]))(x)).reshape(36, 36)
    out, inp = np.meshgrid(np.arange(36), np.arange(36), indexing="ij")
    before = inp < out
    assert np.all(jac[~before] == 0.0)
    assert np.all(np.abs(jac[before]) > 1e-7), np.argwhere((np.abs(jac) <= 1e-7) & before)


@pytest.mark.parametrize("shallow", [False, True])
def test_group_logits_gradient_reads_only_coarse_and_earlier_groups(shallow):
    """Group g's logits: exactly zero gradient at later groups' pixels; at its own pixels
    exactly zero (one pass) or, with the shallow PixelCNN, nonzero only from the group's
    pixels before it in the group's own raster order (the K x K grid ``fine[r::2, c::2]``);
    nonzero somewhere at the coarse pixels and at every earlier group's."""
    model = MultiscalePixelCNN(8, base=2, shallow=shallow, key=jax.random.key(2), **SMALL)
    fine = jax.random.uniform(jax.random.key(3), (8, 8))  # doubling 1: 4x4 -> 8x8, K = 4

    @jax.jit
    def jacobians(fine):
        return [jax.jacrev(lambda f, g=g: model.group_logits(f, 1, g)[..., 0])(fine)
                for g in range(3)]

    label = blocks_of(8)
    k = 4
    for g, ((r, c), jac) in enumerate(zip(GROUPS, jacobians(fine), strict=True)):
        jac = np.asarray(jac)  # (K, K, 8, 8)
        assert jac.shape == (k, k, 8, 8)
        for earlier in range(g + 1):  # 0: the coarse pixels
            assert np.any(np.abs(jac[..., label == earlier]) > 1e-7), (g, earlier)
        for later in range(g + 2, 4):
            assert np.all(jac[..., label == later] == 0.0), (g, later)
        own = jac[:, :, r::2, c::2].reshape(k * k, k * k)  # (output t, group pixel t')
        out, inp = np.meshgrid(np.arange(k * k), np.arange(k * k), indexing="ij")
        if shallow:
            assert np.all(own[inp >= out] == 0.0), g
            assert np.any(np.abs(own[inp < out]) > 1e-7), g
        else:
            assert np.all(own == 0.0), g


# exact normalisation -------------------------------------------------------------------------

@pytest.mark.parametrize("kind,factor", [("gated", 100.0), ("multiscale", 20.0),
                                         ("shallow", 100.0)])
def test_log_prob_sums_to_one_over_every_4x4_binary_image(kind, factor):
    key = jax.random.key(4)
    if kind == "gated":
        model = GatedPixelCNN(2, channels=4, layers=2, first_kernel=3, key=key)
    else:
        model = MultiscalePixelCNN(4, base=2, shallow=kind == "shallow", key=key, **SMALL)
    model = sharpen(model, factor)
    images = every_image(16).reshape(-1, 4, 4)
    log_p = np.asarray(jax.jit(jax.vmap(model.log_prob))(images), np.float64)
    assert log_p.max() - log_p.min() > 5.0  # far from uniform: a leak would show
    assert abs(np.exp(log_p).sum() - 1.0) < 1e-4


def test_log_prob_sums_to_one_over_every_1x2_eight_bit_image():
    model = sharpen(GatedPixelCNN(256, channels=4, layers=2, first_kernel=3,
                                  key=jax.random.key(5)), 100.0)
    first, second = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    images = np.stack([first.ravel(), second.ravel()], -1).reshape(-1, 1, 2).astype(np.int32)
    log_p = np.asarray(jax.jit(jax.vmap(model.log_prob))(images), np.float64)
    assert log_p.max() - log_p.min() > 5.0
    assert abs(np.exp(log_p).sum() - 1.0) < 1e-4


# samplers against the likelihood -------------------------------------------------------------

SAMPLES = 20_000


def chi_square_p(images: jax.Array, log_prob) -> tuple[float, float, np.ndarray]:
    """Counts of the 16 binary 2x2 images against ``exp(log_prob)``: the p-value, the total
    probability, and the probabilities."""
    codes = np.asarray(images).reshape(-1, 4) @ np.array([8, 4, 2, 1])
    counts = np.bincount(codes, minlength=16)
    p = np.exp(np.asarray(jax.jit(jax.vmap(log_prob))(every_image(4).reshape(-1, 2, 2)),
                          np.float64))
    return stats.chisquare(counts, p / p.sum() * SAMPLES).pvalue, p.sum(), p


def test_sample_sequential_matches_log_prob():
    model = sharpen(GatedPixelCNN(2, channels=4, layers=2, first_kernel=3,
                                  key=jax.random.key(6)), 300.0)
    draw = jax.jit(jax.vmap(lambda k: sample_sequential(model, k, jnp.zeros((2, 2)))[0]))
    images = draw(jax.random.split(jax.random.key(7), SAMPLES))
    p_value, total, p = chi_square_p(images, model.log_prob)
    assert abs(total - 1.0) < 1e-5
    assert p_value > 1e-3
    assert p.min() * SAMPLES > 5 and p.max() > 10 * p.min()  # chi-square holds; not uniform
    other = sharpen(GatedPixelCNN(2, channels=4, layers=2, first_kernel=3,
                                  key=jax.random.key(8)), 300.0)
    assert chi_square_p(images, other.log_prob)[0] < 1e-3  # the test has power


@pytest.mark.parametrize("shallow,channels,factor", [(False, 4, 30.0), (True, 8, 100.0)])
def test_sample_multiscale_matches_log_prob(shallow, channels, factor):
    def build(seed):
        return sharpen(MultiscalePixelCNN(2, base=1, shallow=shallow, key=jax.random.key(seed),
                                          **{**SMALL, "channels": channels}), factor)
    model = build(9)
    draw = jax.jit(jax.vmap(lambda k: sample_multiscale(model, k).image))
    images = draw(jax.random.split(jax.random.key(10), SAMPLES))
    p_value, total, p = chi_square_p(images, model.log_prob)
    assert abs(total - 1.0) < 1e-5
    assert p_value > 1e-3
    assert p.min() * SAMPLES > 5 and p.max() > 10 * p.min()
    assert chi_square_p(images, build(11).log_prob)[0] < 1e-3


# evaluation counts ---------------------------------------------------------------------------

def test_sample_sequential_counts_one_evaluation_per_pixel_and_resumes():
    model = GatedPixelCNN(2, channels=4, layers=1, first_kernel=3, key=jax.random.key(12))
    key = jax.random.key(13)
    whole = jax.jit(lambda k: sample_sequential(model, k, jnp.zeros((4, 4), jnp.int32)))
    part = jax.jit(lambda k, c, a, b: sample_sequential(model, k, c, a, b))
    image, count = whole(key)
    assert int(count) == 16 == evaluations(4)["deep"]
    half, first = part(key, jnp.zeros((4, 4), jnp.int32), 0, 7)
    assert np.all(np.asarray(half).ravel()[7:] == 0)
    rest, second = part(key, half, 7, 16)
    assert (int(first), int(second)) == (7, 9)
    np.testing.assert_array_equal(rest, image)


def test_receptive_rows_is_exactly_how_far_up_the_logits_reach():
    model = GatedPixelCNN(2, channels=8, layers=3, first_kernel=7, key=jax.random.key(21))
    rows = receptive_rows(model)
    assert rows == 3 + 1 + 1 + 1  # first_kernel // 2, then kernel // 2 twice, then the shift
    x = jax.random.bernoulli(jax.random.key(22), 0.5, (12, 5)).astype(jnp.float32)
    jacobian = np.asarray(jax.jacobian(lambda x: model(x)[11, :, 0])(x))  # the last row's logits
    reached = np.flatnonzero(np.abs(jacobian).sum(axis=(0, 2)))
    assert reached.min() == 11 - rows and reached.max() == 11


def test_sample_windowed_draws_the_naive_samples_with_one_evaluation_per_pixel():
    model = GatedPixelCNN(2, channels=8, layers=2, first_kernel=5, key=jax.random.key(23))
    model = eqx.tree_at(lambda m: m.head, model, model.head * 30)  # far from uniform
    canvas = jnp.zeros((10, 6), jnp.int32)  # taller than the window (receptive_rows + 1 = 5)
    keys = jax.random.split(jax.random.key(24), 8)
    naive, naive_count = jax.jit(jax.vmap(lambda k: sample_sequential(model, k, canvas)))(keys)
    windowed, count = jax.jit(jax.vmap(lambda k: sample_windowed(model, k, canvas)))(keys)
    np.testing.assert_array_equal(windowed, naive)
    assert 0.1 < float(naive.mean()) < 0.9
    assert np.all(np.asarray(count) == 60) and np.all(np.asarray(naive_count) == 60)


@pytest.mark.parametrize("shallow", [False, True])
def test_sample_multiscale_counts_evaluations(shallow):
    """Size 8 from base 2: 4 base pixels + 3 groups x 2 doublings deep passes; the shallow
    PixelCNNs once per pixel outside the base image (64 - 4)."""
    model = MultiscalePixelCNN(8, base=2, shallow=shallow, key=jax.random.key(14), **SMALL)
    sample = jax.jit(lambda k: sample_multiscale(model, k))(jax.random.key(15))
    expected = {"deep": 10, "shallow": 60 if shallow else 0}
    assert evaluations(8, 2, shallow) == expected
    assert {"deep": int(sample.deep), "shallow": int(sample.shallow)} == expected
    assert [s.shape for s in sample.stages] == [(2, 2)] + [(4, 4)] * 3 + [(8, 8)] * 3
    np.testing.assert_array_equal(sample.image[::4, ::4], sample.stages[0])
    np.testing.assert_array_equal(sample.image[::2, ::2], sample.stages[3])
    np.testing.assert_array_equal(sample.image, sample.stages[-1])
    assert set(np.unique(sample.image)) <= {0, 1}


def test_evaluations_formula():
    assert evaluations(32) == {"deep": 1024, "shallow": 0}
    assert evaluations(32, 4) == {"deep": 16 + 3 * 3, "shallow": 0}
    assert evaluations(32, 4, shallow=True) == {"deep": 25, "shallow": 1024 - 16}


# bad input -----------------------------------------------------------------------------------

def test_multiscale_pixelcnn_rejects_size_not_base_times_power_of_two():
    with pytest.raises(ValueError, match="size 24") as error:
        MultiscalePixelCNN(size=24, base=4, key=jax.random.key(0))
    assert "\n" not in str(error.value)


def test_doublings_counts_and_rejects():
    assert (doublings(4, 4), doublings(32, 4), doublings(28, 7)) == (0, 3, 2)
    with pytest.raises(ValueError, match="size 48") as error:
        doublings(48, 4)
    assert "\n" not in str(error.value)


@pytest.mark.timeout(30, method="signal")
def test_doublings_rejects_base_below_one():
    """A base of 0 (or below) never reaches the size: a ValueError, not an endless loop."""
    with pytest.raises(ValueError):
        doublings(8, 0)


def test_check_levels_accepts_and_rejects():
    check_levels(jnp.array([[0, 1], [1, 0]]), 2)
    check_levels(jnp.array([[0, 255]]), 256)
    with pytest.raises(ValueError, match="built for 2 levels") as error:
        check_levels(jnp.array([[0, 17], [255, 3]]), 2)
    assert "\n" not in str(error.value)
    assert "levels=256" in str(error.value)
    with pytest.raises(ValueError):
        check_levels(jnp.array([[-1, 1]]), 2)
    with pytest.raises(ValueError):
        check_levels(jnp.array([[-3, 0]]), 256)


def test_check_levels_negative_message_names_the_negative_level():
    """Images below level 0: the message says so, rather than 'levels up to 1 ... build it
    with levels=2' for a model already built with 2."""
    with pytest.raises(ValueError, match="-1") as error:
        check_levels(jnp.array([[-1, 1]]), 2)
    assert "levels=2 " not in str(error.value)


# training ------------------------------------------------------------------------------------

def test_make_train_lowers_nll_and_seeds_are_independent():
    data = jnp.array([np.eye(4), np.fliplr(np.eye(4))], jnp.int32)
    models = [GatedPixelCNN(2, channels=4, layers=2, first_kernel=3, key=k)
              for k in jax.random.split(jax.random.key(16), 2)]
    start, run, measure = make_train(optax.adam(3e-2), batch=2, chunk=10)
    keys = jax.random.split(jax.random.key(17), (3, 2))  # (chunk call, seed)

    state = start(stacked(models))
    before = np.asarray(measure(state, data))
    assert np.allclose(before, 16 * np.log(2.0), atol=0.5)  # heads start near uniform
    for chunk_keys in keys:
        state, losses = run(state, data, chunk_keys)
        assert losses.shape == (2, 10)
    after = np.asarray(measure(state, data))
    assert np.all(after < before - 2.0), (before, after)

    for s, model in enumerate(models):
        alone = start(stacked([model]))
        for chunk_keys in keys:
            alone, _ = run(alone, data, chunk_keys[s:s + 1])
        for a, b in zip(jax.tree.leaves(alone.model), jax.tree.leaves(state.model),
                        strict=True):
            np.testing.assert_allclose(a[0], b[s], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(measure(alone, data)[0], after[s], rtol=1e-5)

    # a chunk run a piece at a time (pieces of 4, 4, 2 steps) is the same chunk, bit for bit
    first = start(stacked(models))
    whole, whole_losses = run(first, data, keys[0])
    pieces = [run(first, data, keys[0], 0, 4)]
    for at, count in ((4, 4), (8, 2)):
        pieces.append(run(pieces[-1][0], data, keys[0], at, count))
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(pieces[-1][0]), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(whole_losses, np.concatenate([p[1] for p in pieces], 1))


# per-pixel likelihood and units --------------------------------------------------------------

def test_pixel_log_prob_binary_hand_values():
    np.testing.assert_allclose(pixel_log_prob(jnp.zeros((2, 1)), jnp.array([0, 1]), 2),
                               [np.log(0.5)] * 2, rtol=1e-6)
    logits = np.array([-2.0, 0.5, 3.0])
    one = pixel_log_prob(jnp.array(logits)[:, None], jnp.ones(3, jnp.int32), 2)
    zero = pixel_log_prob(jnp.array(logits)[:, None], jnp.zeros(3, jnp.int32), 2)
    np.testing.assert_allclose(one, -np.log1p(np.exp(-logits)), rtol=1e-6)
    np.testing.assert_allclose(zero, -np.log1p(np.exp(logits)), rtol=1e-6)


def test_pixel_log_prob_softmax_hand_values():
    logits = np.asarray(jax.random.normal(jax.random.key(18), (3, 256)), np.float64) * 3
    x = np.array([0, 17, 255])
    expected = logits[np.arange(3), x] - special.logsumexp(logits, -1)
    np.testing.assert_allclose(pixel_log_prob(jnp.array(logits), jnp.array(x), 256), expected,
                               rtol=1e-5)


def test_parameter_count_hand_count():
    """Channels 2, first kernel 3 (2 rows x 3 vertical, 1 x 2 horizontal), kernel 3 after."""
    first = 2 * 3 * 1 * 4 + 1 * 2 * 1 * 4 + 4 * 4 + 2 * 2 + 4 + 4  # vertical ... bias_h: 60
    later = 2 * 3 * 2 * 4 + 1 * 2 * 2 * 4 + 4 * 4 + 2 * 2 + 4 + 4  # 92
    head = 2 * 2 + 2 * 256 + 2 + 256  # hidden, head, their biases: 774
    assert parameter_count(GatedPixelCNN(256, channels=2, layers=2, first_kernel=3, kernel=3,
                                         key=jax.random.key(0))) == first + later + head


def test_bits_per_dim_hand_values():
    assert bits_per_dim(3 * np.log(2.0), 2) == pytest.approx(1.5)
    assert bits_per_dim(784 * np.log(2.0) * 0.25, 784) == pytest.approx(0.25)
