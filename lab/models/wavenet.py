"""WaveNet: a conditional autoregressive model of raw audio, with a discretised mixture of
logistics output (the Parallel WaveNet teacher).

van den Oord et al., "WaveNet: A Generative Model for Raw Audio" (2016) and "Parallel
WaveNet: Fast High-Fidelity Speech Synthesis" (arXiv 1711.10433): a stack of dilated causal
convolutions (kernel 2, dilations 1, 2, 4, ... repeated), each a gated unit ``tanh(W_f * x +
V_f c) * sigmoid(W_g * x + V_g c)`` with the conditioning ``c`` (log-mel frames upsampled to
the sample rate) added in every layer through a 1x1 projection, a residual connection and a
skip connection; the skips are summed, ReLU - 1x1 - ReLU - 1x1 to the output distribution.
The output is the discretised mixture of logistics of PixelCNN++ (Salimans et al. 2017) over
``bins`` levels of [-1, 1] (65,536: 16-bit audio), as in Parallel WaveNet's teacher.
Deviation from PixelCNN++ (issue 42): every bin's mass is exact (``logistic_log_mass``,
``gaussian_log_mass``) where PixelCNN++ takes density x bin width below a mass of 1e-5. With
8-bit bins and its -7 log-scale clip that never happens; with 16-bit bins and the -16 clip
here (scales down to 1/270 of a bin) it was off by up to 130 nats (mixture) and 7,460
(Gaussian), at exactly the scales a teacher learns on digital silence.

``WaveNet.__call__(x, c)`` takes ONE utterance: ``x`` ``(T,)`` audio in [-1, 1] and ``c``
``(T, bands)``, and returns ``(T, 3 K)`` mixture parameters for each sample given the samples
before it (the input is shifted right by one). Batch with ``jax.vmap``.

Sampling (one network step per sample): ``sample_naive`` recomputes the receptive field for
every sample; ``sample_cached`` keeps each layer's last ``dilation`` inputs in a queue in the
``lax.scan`` carry (Paine et al., "Fast WaveNet Generation Algorithm", 2016), so a step costs
one column of every layer. For the same noise both draw the same audio.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.init import dense

# the discretised mixture of logistics ---------------------------------------------------------

def split_mixture(params: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(..., 3 K)`` -> mixture logits, means and log scales ``(..., K)`` (log scales clipped
    below at -16, as in PixelCNN++'s -7 for 8 bits, here for 16-bit bins)."""
    logits, means, log_scales = jnp.split(params, 3, axis=-1)
    return logits, means, jnp.maximum(log_scales, -16.0)


def logistic_log_mass(centred: jax.Array, log_scale: jax.Array, half: float) -> jax.Array:
    """``log(sigmoid(b) - sigmoid(a))`` with ``a, b = (centred -/+ half) / s``: the exact log
    mass of a logistic of scale ``s = exp(log_scale)`` on the bin ``[x - half, x + half]``
    (``centred = x - mean``), for every scale. It never subtracts two probabilities:
    ``sigmoid(b) - sigmoid(a) = sigmoid(b) sigmoid(-a) (1 - exp(-(b - a)))``, so the log is
    ``-softplus(-b) - softplus(a) + log(-expm1(-(b - a)))`` with ``b - a = 2 half / s`` exact."""
    inv_scale = jnp.exp(-log_scale)
    lower = inv_scale * (centred - half)
    upper = inv_scale * (centred + half)
    width = 2.0 * half * inv_scale
    return -jax.nn.softplus(-upper) - jax.nn.softplus(lower) + jnp.log(-jnp.expm1(-width))


def mixture_log_prob(params: jax.Array, x: jax.Array, bins: int = 65536) -> jax.Array:
    """``log P(x)`` (nats) of audio ``x`` ``(...)`` (values on the grid of ``bins`` levels of
    [-1, 1]) under the discretised mixture ``params`` ``(..., 3 K)``: each logistic's exact
    mass on the bin ``[x - 1/(bins-1), x + 1/(bins-1)]`` (``logistic_log_mass``), with the
    lowest bin reaching to -inf and the highest to +inf, so the masses of all bins sum to 1.
    PixelCNN++ replaces a mass below 1e-5 by density x bin width; with 65,536 bins and log
    scales down to -16 that is off by up to 130 nats, so it is not done here."""
    logits, means, log_scales = split_mixture(params)
    centred = x[..., None] - means
    half = 1.0 / (bins - 1)
    inv_scale = jnp.exp(-log_scales)
    log_cdf_upper = -jax.nn.softplus(-inv_scale * (centred + half))  # the lowest bin
    log_survival_lower = -jax.nn.softplus(inv_scale * (centred - half))  # the highest
    log_mass = logistic_log_mass(centred, log_scales, half)
    x = x[..., None]
    log_p = jnp.where(x < -1.0 + half / 2, log_cdf_upper,
                      jnp.where(x > 1.0 - half / 2, log_survival_lower, log_mass))
    return jax.nn.logsumexp(log_p + jax.nn.log_softmax(logits, -1), axis=-1)


def quantise(x: jax.Array, bins: int = 65536) -> jax.Array:
    """``x`` clipped to [-1, 1] and rounded to the nearest of ``bins`` levels."""
    step = 2.0 / (bins - 1)
    return jnp.round((jnp.clip(x, -1.0, 1.0) + 1.0) / step) * step - 1.0


def sample_mixture(key: jax.Array, params: jax.Array, bins: int = 65536) -> jax.Array:
    """One draw per position from the mixture ``params`` ``(..., 3 K)``: a component, then a
    logistic sample ``mu + s (log u - log(1 - u))``, clipped and quantised to the grid."""
    logits, means, log_scales = split_mixture(params)
    k_component, k_logistic = jax.random.split(key)
    component = jax.random.categorical(k_component, logits, axis=-1)
    mean = jnp.take_along_axis(means, component[..., None], -1)[..., 0]
    log_scale = jnp.take_along_axis(log_scales, component[..., None], -1)[..., 0]
    u = jax.random.uniform(k_logistic, mean.shape, minval=1e-5, maxval=1.0 - 1e-5)
    return quantise(mean + jnp.exp(log_scale) * (jnp.log(u) - jnp.log1p(-u)), bins)


_NODES = (0.0, -0.5384693101056831, 0.5384693101056831, -0.9061798459386640,
          0.9061798459386640)  # 5-point Gauss-Legendre on [-1, 1]
_WEIGHTS = (0.5688888888888889, 0.4786286704993665, 0.4786286704993665, 0.2369268850561891,
            0.2369268850561891)


def gaussian_log_mass(centred: jax.Array, log_scale: jax.Array, half: float) -> jax.Array:
    """``log(Phi(b) - Phi(a))`` with ``a, b = c -/+ h``, ``c = centred / s``, ``h = half / s``:
    the exact log mass of a Gaussian of scale ``s`` on the bin ``[x - half, x + half]``
    (``centred = x - mean``), in float32 for every scale. No probability is subtracted from
    another. Mirrored below the mean (``Phi(b) - Phi(a) = Phi(-a) - Phi(-b)``) it is
    ``log Phi(b) + log(-expm1(log Phi(a) - log Phi(b)))`` (``log_ndtr``: exact in the tail),
    which cancels when the bin is narrow against both the scale and the distance to the mean
    (``h |c| < 1`` and ``h < 1/4``); there the integral of the density over the bin is taken
    in log space by 5-point Gauss-Legendre, whose relative error is below ``1e-9 (h c)^10``:
    both forms agree to float32 precision where they meet."""
    inv_scale = jnp.exp(-log_scale)
    c = -jnp.abs(centred) * inv_scale  # mirrored below the mean: the same mass
    h = half * inv_scale
    log_upper = jax.scipy.special.log_ndtr(c + h)
    log_lower = jax.scipy.special.log_ndtr(c - h)
    # clamped below 0: the unused side of the select keeps a finite gradient
    tail = log_upper + jnp.log(-jnp.expm1(jnp.minimum(log_lower - log_upper, -1e-30)))
    points = c[..., None] + h[..., None] * jnp.asarray(_NODES)
    quadrature = (jnp.log(h) - 0.5 * jnp.log(2.0 * jnp.pi)
                  + jax.nn.logsumexp(jnp.log(jnp.asarray(_WEIGHTS)) - 0.5 * points ** 2, -1))
    narrow = (h < 0.25) & (h * jnp.abs(c) < 1.0)
    return jnp.where(narrow, quadrature, tail)


def gaussian_log_prob(params: jax.Array, x: jax.Array, bins: int = 65536) -> jax.Array:
    """``log P(x)`` of audio ``x`` on the grid under the discretised Gaussian ``params``
    ``(..., 2)`` (mean, log scale; ClariNet's teacher): the exact mass of ``x``'s bin
    (``gaussian_log_mass``), the end bins reaching to infinity."""
    mean, log_scale = params[..., 0], jnp.maximum(params[..., 1], -16.0)
    half = 1.0 / (bins - 1)
    centred = x - mean
    inv_scale = jnp.exp(-log_scale)
    lowest = jax.scipy.special.log_ndtr(inv_scale * (centred + half))
    highest = jax.scipy.special.log_ndtr(-inv_scale * (centred - half))  # log(1 - Phi(a))
    log_mass = gaussian_log_mass(centred, log_scale, half)
    return jnp.where(x < -1.0 + half / 2, lowest, jnp.where(x > 1.0 - half / 2, highest,
                                                              log_mass))


def sample_gaussian(key: jax.Array, params: jax.Array, bins: int = 65536) -> jax.Array:
    """One draw per position from the Gaussian ``params`` ``(..., 2)``, quantised."""
    mean, log_scale = params[..., 0], jnp.maximum(params[..., 1], -16.0)
    return quantise(mean + jnp.exp(log_scale) * jax.random.normal(key, mean.shape), bins)


OUTPUTS = ("mixture", "gaussian")


# the network ---------------------------------------------------------------------------------

class ResidualLayer(eqx.Module):
    """A dilated causal gated layer: ``z = tanh(f) * sigmoid(g)`` with ``[f, g] = W_0
    h_{t-d} + W_1 h_t + V c_t + b``; returns ``(h + R z, S z)`` (residual, skip)."""

    taps: jax.Array  # (2, R, 2G): W_0 (the sample d back) and W_1 (this one)
    cond: jax.Array  # (bands, 2G)
    bias: jax.Array
    residual: jax.Array  # (G, R)
    skip: jax.Array  # (G, S)
    dilation: int = eqx.field(static=True)

    def __init__(self, channels: int, gate: int, skip: int, bands: int, dilation: int, *,
                 key: jax.Array):
        k_taps, k_cond, k_res, k_skip = jax.random.split(key, 4)
        self.taps = dense(k_taps, (2, channels, 2 * gate), 2 * channels)
        self.cond = dense(k_cond, (bands, 2 * gate), bands)
        self.bias = jnp.zeros(2 * gate)
        self.residual = dense(k_res, (gate, channels), gate)
        self.skip = dense(k_skip, (gate, skip), gate)
        self.dilation = dilation

    def gate(self, past: jax.Array, now: jax.Array, cond: jax.Array) -> jax.Array:
        a = past @ self.taps[0] + now @ self.taps[1] + cond @ self.cond + self.bias
        f, g = jnp.split(a, 2, axis=-1)
        return jnp.tanh(f) * jax.nn.sigmoid(g)

    def __call__(self, h: jax.Array, cond: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``h`` ``(T, R)``, ``cond`` ``(T, bands)``: all steps at once (training)."""
        past = jnp.pad(h, ((self.dilation, 0), (0, 0)))[:h.shape[0]]
        z = self.gate(past, h, cond)
        return h + z @ self.residual, z @ self.skip


class WaveNet(eqx.Module):
    """The teacher: input 1x1 projection, ``layers`` residual layers with dilations
    ``2 ** (i % cycle)``, summed skips -> ReLU - 1x1 - ReLU - 1x1 -> ``3 K`` mixture
    parameters."""

    embed: jax.Array  # (1, R): the previous sample into the residual channels
    layers: list[ResidualLayer]
    hidden: jax.Array
    head: jax.Array
    bias_hidden: jax.Array
    bias_head: jax.Array
    bins: int = eqx.field(static=True)
    output: str = eqx.field(static=True)
    sample_rate: int = eqx.field(static=True)  # what the conditioning was computed at

    def __init__(self, bands: int, channels: int = 32, gate: int = 32, skip: int = 64,
                 layers: int = 10, cycle: int = 10, mixtures: int = 10, bins: int = 65536,
                 output: str = "mixture", sample_rate: int = 8000, *, key: jax.Array):
        if output not in OUTPUTS:
            raise ValueError(f"unknown output distribution {output!r}; use one of "
                             f"{', '.join(OUTPUTS)}")
        size = 3 * mixtures if output == "mixture" else 2
        keys = jax.random.split(key, layers + 3)
        self.embed = dense(keys[0], (1, channels), 1)
        self.layers = [ResidualLayer(channels, gate, skip, bands, 2 ** (i % cycle),
                                     key=keys[1 + i]) for i in range(layers)]
        self.hidden = dense(keys[-2], (skip, skip), skip)
        self.head = dense(keys[-1], (skip, size), skip) * 0.1
        self.bias_hidden = jnp.zeros(skip)
        log_scales = slice(2 * mixtures, None) if output == "mixture" else slice(1, None)
        self.bias_head = jnp.zeros(size).at[log_scales].set(-3.0)  # narrow to start
        self.bins, self.output, self.sample_rate = bins, output, sample_rate

    @property
    def receptive_field(self) -> int:
        """How many samples before ``t`` the output at ``t`` sees: ``x[t-1]`` through the
        input, and each layer reaches ``dilation`` further back."""
        return sum(layer.dilation for layer in self.layers) + 1

    def read_out(self, skips: jax.Array) -> jax.Array:
        hidden = jax.nn.relu(jax.nn.relu(skips) @ self.hidden + self.bias_hidden)
        return hidden @ self.head + self.bias_head

    def __call__(self, x: jax.Array, cond: jax.Array, start: int | jax.Array = 0
                 ) -> jax.Array:
        """Mixture parameters ``(T, 3 K)``: row ``t`` depends on ``x[:t]`` and ``cond``. The
        first ``start`` rows stand for time before the utterance: every layer's activations
        there are zero, as the zero padding before step 0 is (``sample_naive`` evaluates
        windows that begin before the utterance)."""
        before = (jnp.arange(x.shape[0]) < start)[:, None]
        previous = jnp.pad(x, (1, 0))[:-1]
        h = jnp.where(before, 0.0, previous[:, None] @ self.embed)
        skips = 0.0
        for layer in self.layers:
            h, s = layer(h, cond)
            h = jnp.where(before, 0.0, h)
            skips = skips + s
        return self.read_out(skips)

    def log_prob(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """``log p(x | cond)`` in nats, summed over the utterance (teacher forcing)."""
        return self.output_log_prob(self(x, cond), x).sum()

    def output_log_prob(self, params: jax.Array, x: jax.Array) -> jax.Array:
        """Per-sample ``log P(x)`` under output parameters ``params``."""
        if self.output == "mixture":
            return mixture_log_prob(params, x, self.bins)
        return gaussian_log_prob(params, x, self.bins)

    def sample_output(self, key: jax.Array, params: jax.Array) -> jax.Array:
        if self.output == "mixture":
            return sample_mixture(key, params, self.bins)
        return sample_gaussian(key, params, self.bins)


def sample_naive(model: WaveNet, key: jax.Array, cond: jax.Array) -> jax.Array:
    """``T = len(cond)`` samples, each from a full evaluation of the network on the last
    ``receptive_field`` samples (``lax.fori_loop``); step ``t`` draws with ``fold_in(key, t)``."""
    length = cond.shape[0]
    # the window ends at the sample being drawn, and reaches back over all it can see
    window = model.receptive_field + 1
    audio = jnp.zeros(window + length)
    cond_padded = jnp.pad(cond, ((window, 0), (0, 0)))

    def body(t, audio):
        x = jax.lax.dynamic_slice(audio, (t + 1,), (window,))
        c = jax.lax.dynamic_slice(cond_padded, (t + 1, 0), (window, cond.shape[1]))
        params = model(x, c, start=jnp.maximum(window - t - 1, 0))[-1]
        return audio.at[window + t].set(model.sample_output(jax.random.fold_in(key, t), params))

    return jax.lax.fori_loop(0, length, body, audio)[window:]


def sample_cached(model: WaveNet, key: jax.Array, cond: jax.Array) -> jax.Array:
    """The same draws as ``sample_naive`` with per-layer queues: layer ``l`` keeps its last
    ``dilation_l`` inputs (a circular buffer in the ``lax.scan`` carry), so each step
    computes one column of every layer."""
    audio, _ = sample_cached_chunk(model, key, cond, cached_state(model), 0)
    return audio


def cached_state(model: WaveNet) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The cached sampler's carry before the first sample: the previous sample (0) and each
    layer's queue of its last ``dilation`` inputs (zeros: silence before the utterance)."""
    return jnp.zeros(()), tuple(jnp.zeros((layer.dilation, model.embed.shape[1]))
                                for layer in model.layers)


def sample_cached_chunk(model: WaveNet, key: jax.Array, cond: jax.Array, state, start
                        ) -> tuple[jax.Array, tuple]:
    """Samples ``start ... start + len(cond) - 1`` from the carry ``state`` (``cached_state``
    at ``start = 0``); returns them and the carry to go on from. Chunks in turn draw what one
    ``sample_cached`` call draws (the live panel shows each chunk as it lands)."""

    def step(carry, inputs):
        previous, queues = carry
        t, c = inputs
        h = previous * model.embed[0]
        skips, new_queues = 0.0, []
        for layer, queue in zip(model.layers, queues, strict=True):
            slot = t % layer.dilation
            past = queue[slot]  # this layer's input ``dilation`` steps ago (zeros at first)
            new_queues.append(queue.at[slot].set(h))
            z = layer.gate(past, h, c)
            h, skips = h + z @ layer.residual, skips + z @ layer.skip
        x = model.sample_output(jax.random.fold_in(key, t), model.read_out(skips))
        return (x, tuple(new_queues)), x

    steps = start + jnp.arange(cond.shape[0])
    state, audio = jax.lax.scan(step, state, (steps, cond))
    return audio, state


# the student: an inverse autoregressive flow ----------------------------------------------------

class Flow(eqx.Module):
    """One inverse autoregressive flow: ``x_t = z_t s_t + mu_t`` with ``(mu_t, log s_t)``
    from a WaveNet-like causal stack over ``z_{<t}`` and the conditioning (residual layers,
    no skip connections: the last layer's residual stream is read out). Every ``x_t`` is
    computed at once from ``z``: sampling is one parallel pass; inverting is sequential."""

    embed: jax.Array
    layers: list[ResidualLayer]
    head: jax.Array  # (R, 2): mu and log s
    bias_head: jax.Array

    def __init__(self, bands: int, channels: int = 16, layers: int = 6, cycle: int = 6,
                 log_scale: float = 0.0, *, key: jax.Array):
        keys = jax.random.split(key, layers + 2)
        self.embed = dense(keys[0], (1, channels), 1)
        self.layers = [ResidualLayer(channels, channels, 1, bands, 2 ** (i % cycle),
                                     key=keys[1 + i]) for i in range(layers)]
        self.head = dense(keys[-1], (channels, 2), channels) * 0.01
        self.bias_head = jnp.array([0.0, log_scale])  # starts near x = z exp(log_scale)

    def shift_and_log_scale(self, z: jax.Array, cond: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(mu, log s)`` ``(T,)``: row ``t`` depends on ``z[:t]`` and ``cond`` only."""
        h = jnp.pad(z, (1, 0))[:-1, None] @ self.embed
        for layer in self.layers:
            h, _ = layer(h, cond)
        out = h @ self.head + self.bias_head
        return out[:, 0], out[:, 1]

    def __call__(self, z: jax.Array, cond: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(x, mu, log s)`` with ``x = z exp(log s) + mu``."""
        mu, log_s = self.shift_and_log_scale(z, cond)
        return z * jnp.exp(log_s) + mu, mu, log_s

    def inverse(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """``z`` with ``self(z)[0] == x``, one step at a time (``z_t`` needs ``z_{<t}``)."""
        def body(t, z):
            mu, log_s = self.shift_and_log_scale(z, cond)
            return z.at[t].set((x[t] - mu[t]) * jnp.exp(-log_s[t]))
        return jax.lax.fori_loop(0, x.shape[0], body, jnp.zeros_like(x))


class Student(eqx.Module):
    """A stack of flows on logistic noise ``z ~ Logistic(0, 1)`` (or, ClariNet's variant,
    Gaussian noise; then each step is a Gaussian). Because each flow is affine
    in ``z_t`` with coefficients of ``z_{<t}``, the output is ``x_t = z_t S_t + M_t`` with
    ``S_t`` and ``M_t`` functions of ``z_{<t}`` only: given the past, each ``x_t`` is a
    logistic with mean ``M_t`` and scale ``S_t`` (the per-step composite logistic), whose
    entropy is ``log S_t + 2``."""

    flows: list[Flow]
    base: str = eqx.field(static=True)  # "logistic" (Parallel WaveNet) or "gaussian" (ClariNet)
    sample_rate: int = eqx.field(static=True)

    def __init__(self, bands: int, flows: int = 4, channels: int = 16, layers: int = 6,
                 cycle: int = 6, base: str = "logistic", log_scale: float = 0.0,
                 sample_rate: int = 8000, *, key: jax.Array):
        """``log_scale``: the composite ``log S_t`` the stack starts near (shared equally by
        the flows): audio in [-1, 1] wants a scale well below the base noise's 1."""
        if base not in ("logistic", "gaussian"):
            raise ValueError(f"unknown base distribution {base!r}; use logistic or gaussian")
        self.flows = [Flow(bands, channels, layers, cycle, log_scale / flows, key=k)
                      for k in jax.random.split(key, flows)]
        self.base, self.sample_rate = base, sample_rate

    def noise(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Standard draws of the base distribution."""
        if self.base == "logistic":
            return logistic_noise(key, shape)
        return jax.random.normal(key, shape)

    def entropy(self, log_scale: jax.Array) -> jax.Array:
        """Per-step differential entropy given the composite log scales ``log S_t``."""
        if self.base == "logistic":
            return logistic_entropy(log_scale)
        return log_scale + 0.5 * jnp.log(2 * jnp.pi * jnp.e)

    def __call__(self, z: jax.Array, cond: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(x, M, log S)`` ``(T,)`` from noise ``z`` ``(T,)``, in one parallel pass per flow:
        ``M <- M s + mu``, ``log S <- log S + log s``."""
        x, mean, log_scale = z, jnp.zeros_like(z), jnp.zeros_like(z)
        for flow in self.flows:
            x, mu, log_s = flow(x, cond)
            mean, log_scale = mean * jnp.exp(log_s) + mu, log_scale + log_s
        return x, mean, log_scale

    def inverse(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """The noise that gives ``x`` (each flow inverted in turn, last first)."""
        for flow in reversed(self.flows):
            x = flow.inverse(x, cond)
        return x


def logistic_noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard logistic draws ``log u - log(1 - u)``."""
    u = jax.random.uniform(key, shape, minval=1e-6, maxval=1.0 - 1e-6)
    return jnp.log(u) - jnp.log1p(-u)


def logistic_entropy(log_scale: jax.Array) -> jax.Array:
    """Differential entropy (nats) of a logistic of scale ``exp(log_scale)``: ``log s + 2``."""
    return log_scale + 2.0


def bands_of(model: WaveNet | Student) -> int:
    """The mel bands a teacher or student was built for."""
    layer = model.layers[0] if isinstance(model, WaveNet) else model.flows[0].layers[0]
    return layer.cond.shape[-2]


def check_conditioning(model: WaveNet | Student, cond: jax.Array, sample_rate: int) -> None:
    """A one-line ValueError when ``cond`` ``(..., T, bands)`` at ``sample_rate`` is not what
    ``model`` was built for (before anything is traced with it)."""
    name = type(model).__name__
    if sample_rate != model.sample_rate:
        raise ValueError(f"audio at {sample_rate} Hz, but the {name} was built for "
                         f"{model.sample_rate} Hz; resample the audio or build the model with "
                         f"sample_rate={sample_rate}")
    if cond.shape[-1] != bands_of(model):
        raise ValueError(f"conditioning has {cond.shape[-1]} mel bands, but the {name} was "
                         f"built for {bands_of(model)}; compute log_mel with "
                         f"bands={bands_of(model)}")
