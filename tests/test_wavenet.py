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


@pytest.mark.parametrize("bins", [16, 65536])
def test_gaussian_probabilities_over_every_bin_sum_to_one(bins):
    params = jnp.array([0.2, np.log(0.3)])
    grid = jnp.linspace(-1.0, 1.0, bins)
    log_p = jax.vmap(lambda v: gaussian_log_prob(params, v, bins))(grid)
    assert np.exp(np.asarray(log_p, np.float64)).sum() == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("bins", [16, 65536])
def test_mixture_probabilities_over_every_bin_sum_to_one(bins):
    params = jnp.array([0.3, -1.0, 2.0, -0.9, 0.1, 0.95, -2.5, -4.0, -6.0])  # 3 components
    grid = jnp.linspace(-1.0, 1.0, bins)
    probabilities = np.exp(np.asarray(jax.vmap(lambda v: mixture_log_prob(params, v, bins))(grid),
                                      np.float64))
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-4)
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
