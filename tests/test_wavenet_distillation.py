"""Probability Density Distillation's losses against closed forms and Monte Carlo."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.data.speech import synthetic
from lab.train.wavenet import (
    clarinet_stft,
    gaussian_kl,
    kl_estimate,
    mixture_log_density,
    power_loss,
    power_loss_optimum,
    spectral_frame_loss,
    stft_power,
)


def test_kl_estimate_is_about_zero_when_the_teacher_is_the_student():
    length = 12
    mean = jnp.linspace(-0.5, 0.5, length)
    log_scale = jnp.linspace(-4.0, -1.0, length)
    same = jnp.stack([jnp.zeros(length), mean, log_scale], -1)  # a one-logistic teacher
    kl, aux = kl_estimate(jax.random.key(0), mean, log_scale, same, draws=20_000)
    assert abs(float(kl)) < 0.05 and float(aux["entropy"]) == pytest.approx(
        float(jnp.sum(log_scale + 2.0)))
    shifted = same.at[:, 1].add(jnp.exp(log_scale))  # each step's teacher one scale away
    kl_shifted, _ = kl_estimate(jax.random.key(0), mean, log_scale, shifted, draws=20_000)
    assert float(kl_shifted) > 1.0


def test_mixture_density_integrates_to_one():
    params = jnp.array([0.3, -1.0, 0.2, -0.3, 0.4, -2.0, -3.0, -1.5, -4.0])
    grid = jnp.linspace(-3.0, 3.0, 600_001)
    density = np.exp(np.asarray(mixture_log_density(params, grid), np.float64))
    assert np.trapezoid(density, np.asarray(grid, np.float64)) == pytest.approx(1.0, abs=1e-4)


def test_gaussian_kl_matches_monte_carlo():
    m_s, log_s_s, m_t, log_s_t = 0.2, np.log(0.5), -0.1, np.log(0.8)
    x = m_s + 0.5 * np.random.default_rng(0).standard_normal(2_000_000)

    def log_normal(x, m, log_s):
        return -0.5 * ((x - m) / np.exp(log_s)) ** 2 - log_s - 0.5 * np.log(2 * np.pi)

    monte_carlo = np.mean(log_normal(x, m_s, log_s_s) - log_normal(x, m_t, log_s_t))
    closed = float(gaussian_kl(m_s, log_s_s, m_t, log_s_t))
    assert closed == pytest.approx(monte_carlo, abs=2e-3)
    assert float(gaussian_kl(m_s, log_s_s, m_s, log_s_s)) == pytest.approx(0.0, abs=1e-7)


def test_power_loss_is_zero_for_identical_signals_and_blind_to_the_sign():
    x = jnp.asarray(synthetic(0.25, 8000))
    y = jnp.asarray(synthetic(0.25, 8000, seed=1, harmonics=2))
    assert float(power_loss(x, x)) == 0.0
    assert float(power_loss(x, -x)) == pytest.approx(0.0, abs=1e-6)  # magnitudes only
    assert float(power_loss(x, y)) > 1.0


def test_the_power_loss_is_smallest_near_the_reference_power_below_it_by_its_own_bias():
    """The paper's loss (time-averaged powers, then the distance) against a fixed noise
    reference, for scaled noise over 2,048 samples (the students' crops): the expected loss
    over 256 draws is smallest within 10% of 1x the power, where ``power_loss_optimum``'s
    closed form puts it (0.94x: the time average still scatters); the per-frame form used
    until issue 42 is smallest near half of it."""
    length, frame, hop = 2048, 256, 64
    reference = jax.random.normal(jax.random.key(0), (length,))
    noise = jax.random.normal(jax.random.key(1), (256, length))
    powers = np.linspace(0.3, 1.6, 27)

    def per_frame(x, y):
        return jnp.mean((stft_power(x, frame, hop) - stft_power(y, frame, hop)) ** 2)

    def best(loss):
        expected = [float(jax.vmap(lambda x, p=p: loss(np.sqrt(p) * x, reference))(noise).mean())
                    for p in powers]
        return powers[int(np.argmin(expected))]

    grid_best = best(lambda x, y: power_loss(x, y, frame, hop))
    optimum = power_loss_optimum(length, frame, hop)
    assert abs(grid_best - 1.0) <= 0.1 and abs(grid_best - optimum) <= 0.05  # one grid step
    assert 0.92 < optimum < 0.955  # -0.28 dB: the student's gap is read against it
    assert power_loss_optimum(1024, frame, hop) < optimum  # fewer frames scatter more
    assert best(per_frame) < 0.6


def test_the_stft_magnitude_loss_prefers_a_quieter_sample_of_noise():
    """Why ClariNet's STFT term cannot stop a whisper on its own: between a sample ``g x``
    and an independent reference ``y`` of the same noise, ``E (g |X| - |Y|)^2`` is smallest
    at ``g* = E|X| E|Y| / E|X|^2``; a complex Gaussian bin has a Rayleigh magnitude,
    ``(E|X|)^2 / E|X|^2 = pi / 4``, so the loss is smallest at ``pi^2 / 16 = 0.62`` of the
    reference's power (the spectral_frame_loss grid over g agrees: 0.61)."""
    noise = jax.random.normal(jax.random.key(0), (64, 2048))
    magnitude = np.sqrt(np.asarray(jax.vmap(lambda x: stft_power(x, *clarinet_stft(8000)))(
        noise)))[:, :, 1:-1]  # the DC and Nyquist bins are real: not Rayleigh
    gain = magnitude.mean() ** 2 / (magnitude ** 2).mean()
    assert gain ** 2 == pytest.approx(np.pi ** 2 / 16, rel=0.02)


def test_clarinet_stft_loss_in_closed_form():
    """ClariNet's window, hop and FFT at 8 and 16 kHz; the loss between ``a y`` and ``y`` is
    ``(a - 1)^2`` times the mean squared magnitude, blind to the sign."""
    assert clarinet_stft(8000) == (400, 100, 512)
    assert clarinet_stft(16000) == (800, 200, 1024)
    y = jnp.asarray(synthetic(0.25, 8000))
    stft = clarinet_stft(8000)
    mean_square = float(jnp.mean(stft_power(y, *stft)))
    assert float(spectral_frame_loss(1.5 * y, y, *stft)) == pytest.approx(0.25 * mean_square,
                                                                          rel=1e-4)
    assert float(spectral_frame_loss(-y, y, *stft)) == pytest.approx(0.0, abs=1e-6)


def test_clarinet_floors_both_scales_in_the_kl_and_neither_in_its_regulariser():
    """ksw0306/ClariNet's KL_gaussians: log scales below -6 count as -6 inside the KL, the
    regulariser sees them as they are. Equal means at log scales -10 and -8: KL 0 (both at
    the floor), regulariser (-10 + 8)^2 = 4; at -5 against -3, above the floor, the closed
    form log(s_T / s_S) + s_S^2 / (2 s_T^2) - 1/2 = 2 + e^-4 / 2 - 1/2."""
    from lab.train.wavenet import regularised_kl

    kl, reg = regularised_kl(jnp.zeros(2), jnp.array([-10.0, -5.0]), jnp.zeros(2),
                             jnp.array([-8.0, -3.0]))
    np.testing.assert_allclose(np.asarray(kl), [0.0, 1.5 + np.exp(-4.0) / 2], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(reg), [4.0, 4.0], rtol=1e-6)


def test_clarinet_loss_is_the_closed_form_kl_a_monte_carlo_estimate_agrees_with():
    """The Gaussian variant end to end: a Gaussian-base student against a Gaussian teacher
    (given the student's own sample), the closed-form per-step KL in the loss equals a
    200,000-draw estimate from each step's Gaussian."""
    from lab.models.wavenet import Student, WaveNet
    from lab.train.wavenet import gaussian_distillation_loss, student_sample

    cond = jax.random.normal(jax.random.key(0), (16, 4))
    student = Student(4, flows=2, channels=8, layers=3, cycle=3, base="gaussian",
                      log_scale=-3.0, key=jax.random.key(1))
    teacher = WaveNet(4, channels=8, gate=8, skip=8, layers=3, cycle=3, output="gaussian",
                      key=jax.random.key(2))
    key = jax.random.key(3)
    real = jax.random.normal(jax.random.key(5), (16,)) * 0.1
    loss, aux = gaussian_distillation_loss(student, teacher, key, cond, real, (8, 4, 8))
    # ClariNet's weights: the KL, 4 x the log-scale regulariser, the STFT loss at 1
    assert float(loss) == pytest.approx(float(aux["kl"] + 4 * aux["log_scale_gap"]
                                              + aux["power"]), rel=1e-6)
    x, mean, log_scale = student_sample(student, key, cond)  # the loss's own sample
    params = teacher(x, cond)
    # ClariNet's floor of -6 inside the KL: both scales of this small pair lie above it
    assert float(log_scale.min()) > -6 and float(params[:, 1].min()) > -6
    mean_t, log_scale_t = params[:, 0], params[:, 1]
    draws = mean + jnp.exp(log_scale) * jax.random.normal(jax.random.key(4), (200_000, 16))

    def log_normal(x, m, log_s):
        return -0.5 * ((x - m) / jnp.exp(log_s)) ** 2 - log_s - 0.5 * jnp.log(2 * jnp.pi)

    monte_carlo = jnp.mean(log_normal(draws, mean, log_scale)
                           - log_normal(draws, mean_t, log_scale_t), axis=0)
    closed = gaussian_kl(mean, log_scale, mean_t, log_scale_t)
    assert float(aux["kl"]) == pytest.approx(float(closed.mean()), rel=1e-6)
    np.testing.assert_allclose(np.asarray(monte_carlo), np.asarray(closed), rtol=0.02,
                               atol=0.02)
