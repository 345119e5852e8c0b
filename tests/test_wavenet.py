"""The WaveNet teacher: causality by Jacobian, its receptive field, the discretised mixture
of logistics normalised over every bin, and cached sampling equal to naive sampling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models.wavenet import (
    Student,
    WaveNet,
    gaussian_log_prob,
    logistic_entropy,
    logistic_noise,
    mixture_log_prob,
    quantise,
    sample_cached,
    sample_mixture,
    sample_naive,
)


def teacher(key: int = 0, output: str = "mixture") -> WaveNet:
    model = WaveNet(4, channels=8, gate=8, skip=16, layers=5, cycle=3, mixtures=3,
                    output=output, key=jax.random.key(key))
    # non-zero gate biases: the activations before step 0 are then not zero by accident
    return eqx.tree_at(lambda m: [layer.bias for layer in m.layers], model,
                       [jnp.full_like(layer.bias, 0.3) for layer in model.layers])


def test_wavenet_is_causal_and_sees_exactly_its_receptive_field():
    model = teacher()
    assert model.receptive_field == 1 + (1 + 2 + 4 + 1 + 2)
    length = 40
    cond = jax.random.normal(jax.random.key(1), (length, 4))
    x = jax.random.uniform(jax.random.key(2), (length,), minval=-0.5, maxval=0.5)
    jacobian = np.asarray(jax.jacobian(lambda x: model(x, cond)[:, 0])(x))
    assert np.all(np.triu(jacobian) == 0)  # row t never sees x[t] or later
    for t in range(model.receptive_field, length):
        seen = np.flatnonzero(jacobian[t])
        assert seen.min() == t - model.receptive_field and seen.max() == t - 1


BINS = 65536
HALF = 1.0 / (BINS - 1)


def reference_log_mass(cdf, mean: float, log_scale: float, x: float) -> float:
    """The bin's log mass in float64 from the formula ``log(F(b) - F(a))`` (the end bins
    reaching to infinity), the bin mirrored below the mean so that F's small side is
    subtracted: exact in float64 while the mass stays above 1e-300."""
    s, c = np.exp(log_scale), x - mean
    if x < -1 + HALF / 2:
        return np.log(cdf((c + HALF) / s))
    if x > 1 - HALF / 2:
        return np.log(cdf(-(c - HALF) / s))
    c = -abs(c)
    return np.log(cdf((c + HALF) / s) - cdf((c - HALF) / s))


def reference_cases():
    """Log scales -16 ... 0 (every one the clip allows, to the scale of the whole range),
    targets in the middle of the grid and on both edge bins and their neighbours, means from
    the target's own bin to thousands of bins away; float32 inputs."""
    cases = []
    for log_scale in np.arange(-16.0, 0.01, 0.5, dtype=np.float32):
        for index in (0, 1, 30000, 32767, 65534, 65535):
            x = np.float32(-1 + 2 * index / (BINS - 1))
            for offset in (0.0, 0.3, 0.5, 0.9, 1.0, 2.0, 5.0, -0.9, -2.0, -7.0, 20.0, 3000.0):
                cases.append((np.float32(x + 2 * HALF * offset), log_scale, x))
    return np.array(cases, np.float32)


@pytest.mark.parametrize("output", ["mixture", "gaussian"])
def test_bin_masses_match_a_float64_reference_at_every_scale(output):
    """Within 1e-3 nats in float32 (relative 2e-7 where the log mass is below -5,000 nats,
    beyond float32's absolute resolution), and the gradients finite: PixelCNN++'s
    density-times-width shortcut was off by up to 130 nats (mixture) and 7,460 (Gaussian)
    here."""
    from scipy.special import expit, ndtr
    cases = reference_cases()
    mean, log_scale, x = (jnp.asarray(cases[:, i]) for i in range(3))
    if output == "mixture":
        cdf = expit
        params = jnp.stack([jnp.zeros_like(mean), mean, log_scale], -1)
        fn = lambda p, v: mixture_log_prob(p, v, BINS)  # noqa: E731
    else:
        cdf = ndtr
        params = jnp.stack([mean, log_scale], -1)
        fn = lambda p, v: gaussian_log_prob(p, v, BINS)  # noqa: E731
    got = np.asarray(jax.vmap(fn)(params, x), np.float64)
    with np.errstate(divide="ignore"):
        want = np.array([reference_log_mass(cdf, *map(float, case)) for case in cases])
    ok = np.isfinite(want)  # the reference underflows below 1e-300; ours does not
    assert ok.mean() > 0.8 and np.isfinite(got).all()
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-7, atol=1e-3)
    grads = jax.vmap(jax.grad(fn))(params, x)
    assert np.isfinite(np.asarray(grads)).all()


def test_the_narrow_bin_examples_of_the_review():
    """``mu`` on grid point 30,000, the target one bin above it (the issue's examples)."""
    mu = np.float32(-1 + 2 * 30000 / (BINS - 1))
    x = np.float32(-1 + 2 * 30001 / (BINS - 1))
    assert float(mixture_log_prob(jnp.array([0.0, mu, -14.0]), x)) == pytest.approx(-18.35,
                                                                                    abs=1e-2)
    # the shortcut gave -1501.7; 1.1 bins from a scale of e^-15 is 5 standard deviations
    got = float(gaussian_log_prob(jnp.array([mu + 0.9 / (BINS - 1), -15.0]), x))
    assert got == pytest.approx(-15.06, abs=0.05)


def exact_grid(bins: int) -> jax.Array:
    """The grid rounded once from float64 (``linspace`` in float32 is off by up to 6e-8).
    Rounded grid points overlap or leave gaps of up to an ulp between bins, which moves
    ``density x ulp`` of mass: the narrow scales sit near 0, where the ulp is 1e-12."""
    return jnp.asarray((-1.0 + 2.0 * np.arange(bins) / (bins - 1)).astype(np.float32))


@pytest.mark.parametrize("bins", [16, 65536])
def test_gaussian_probabilities_over_every_bin_sum_to_one(bins):
    grid = exact_grid(bins)
    for mean, log_scale in ((0.2, np.log(0.3)), (2e-5, -12.0), (-0.999, -16.0)):
        params = jnp.array([mean, log_scale])
        log_p = jax.vmap(gaussian_log_prob, (None, 0, None))(params, grid, bins)
        assert np.exp(np.asarray(log_p, np.float64)).sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("bins", [16, 65536])
def test_mixture_probabilities_over_every_bin_sum_to_one(bins):
    grid = exact_grid(bins)
    for params in ([0.3, -1.0, 2.0, -0.9, 0.1, 0.95, -2.5, -4.0, -6.0],  # 3 components
                   [0.0, 1.0, 2e-5, 0.999, -14.0, -16.0]):  # scales far below a bin
        params = jnp.array(params)
        log_p = jax.vmap(mixture_log_prob, (None, 0, None))(params, grid, bins)
        assert np.exp(np.asarray(log_p, np.float64)).sum() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(np.asarray(quantise(grid, bins)), np.asarray(grid), atol=1e-6)


def test_mixture_samples_follow_its_probabilities_on_a_coarse_grid():
    bins = 8
    params = jnp.array([0.0, 1.0, -0.5, 0.4, -1.5, -1.5])  # 2 components
    draws = np.asarray(jax.vmap(lambda k: sample_mixture(k, params, bins))(
        jax.random.split(jax.random.key(0), 40_000)))
    grid = np.linspace(-1, 1, bins)
    counts = np.array([np.isclose(draws, v, atol=1e-4).sum() for v in grid])
    assert counts.sum() == len(draws)
    expected = np.exp(np.asarray(jax.vmap(lambda v: mixture_log_prob(params, v, bins))(grid)))
    assert np.abs(counts / len(draws) - expected).max() < 0.01


@pytest.mark.parametrize("output", ["mixture", "gaussian"])
def test_cached_sampling_draws_what_naive_sampling_draws(output):
    model = teacher(output=output)
    cond = jax.random.normal(jax.random.key(1), (30, 4))
    naive = jax.jit(sample_naive)(model, jax.random.key(3), cond)
    cached = jax.jit(sample_cached)(model, jax.random.key(3), cond)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(naive), atol=1e-6)
    assert np.std(np.asarray(naive)) > 0.01


def student(key: int = 0) -> Student:
    model = Student(4, flows=3, channels=8, layers=3, cycle=3, key=jax.random.key(key))
    # larger read-outs than the near-identity initialisation, so every flow does something
    return eqx.tree_at(lambda m: [f.head for f in m.flows], model,
                       [f.head * 30 for f in model.flows])


def test_each_flow_and_the_student_are_causal():
    model = student()
    cond = jax.random.normal(jax.random.key(1), (24, 4))
    z = jax.random.normal(jax.random.key(2), (24,))
    for flow in model.flows:
        mean = jax.jacobian(lambda z, f=flow: f.shift_and_log_scale(z, cond)[0])
        mu_jacobian = np.asarray(mean(z))
        assert np.all(np.triu(mu_jacobian) == 0) and np.any(mu_jacobian != 0)
    x_jacobian = np.asarray(jax.jacobian(lambda z: model(z, cond)[0])(z))
    assert np.all(np.triu(x_jacobian, 1) == 0)  # x_t: z_t and earlier
    _, _, log_scale = model(z, cond)
    np.testing.assert_allclose(np.diag(x_jacobian), np.exp(np.asarray(log_scale)), rtol=1e-4)


def test_student_inverts():
    model = student()
    cond = jax.random.normal(jax.random.key(3), (20, 4))
    z = logistic_noise(jax.random.key(4), (20,))
    x, _, _ = model(z, cond)
    np.testing.assert_allclose(np.asarray(model.inverse(x, cond)), np.asarray(z), atol=1e-4)


def test_logistic_entropy_matches_monte_carlo():
    log_scale = jnp.log(0.3)
    draws = 0.3 * logistic_noise(jax.random.key(5), (400_000,)) + 0.7
    # -log density of Logistic(0.7, 0.3) at the draws, averaged
    u = (draws - 0.7) / 0.3
    monte_carlo = float(jnp.mean(u + jnp.log(0.3) + 2.0 * jax.nn.softplus(-u)))
    assert float(logistic_entropy(log_scale)) == pytest.approx(monte_carlo, abs=5e-3)
