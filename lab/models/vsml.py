"""VS-ML RNN: every weight of a dense layer is a tiny LSTM sharing one parameter set.

Kirsch & Schmidhuber, "Meta Learning Backpropagation And Improving It", NeurIPS 2021.

A dense layer from ``A`` input units to ``B`` output units holds, for every pair ``(a, b)``,
an LSTM state ``(h_ab, c_ab)`` of ``state`` channels each. All sub-LSTMs of all layers
share the parameters of one :class:`VSMLCell`. One micro-tick of pair ``(a, b)``:

    [i, g, f, o] = W [fwd_a ; bwd_b ; h_ab] + bias
    f = sigmoid(f + 5),  i = sigmoid(i - 5)
    c <- f * c + i * tanh(g),   h <- sigmoid(o) * tanh(c)
    fwd_ab = Lin_f(h_ab),       bwd_ab = Lin_b(h_ab)

and the layer sends ``mean_a fwd_ab`` forward to each output unit ``b`` and ``mean_b
bwd_ab`` backward to each input unit ``a``. The gate matrix is split so that the
projections of ``fwd_a`` and ``bwd_b`` are computed once per row and per column and
broadcast; only the ``h_ab`` projection is per pair. The output maps are affine, so the
averaged messages are computed as ``Lin_f(mean_a h_ab)`` and ``Lin_b(mean_b h_ab)``.

Sizes follow the paper's reference: ``state`` 16 (h) + 16 (c), messages of 8 channels,
about 2.4k parameters in the cell.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from lab.models.init import normal


class VSMLCell(eqx.Module):
    """The shared sub-LSTM: ``tick(fwd (A, m), bwd (B, m), (h, c) (A, B, s))``."""

    w_fwd: jax.Array  # (message, 4 * state): projection of the forward message
    w_bwd: jax.Array  # (message, 4 * state): projection of the backward message
    w_h: jax.Array  # (state, 4 * state): projection of the pair's own h
    bias: jax.Array  # (4 * state,)
    out_fwd: eqx.nn.Linear  # state -> message
    out_bwd: eqx.nn.Linear  # state -> message
    state_size: int = eqx.field(static=True)
    message_size: int = eqx.field(static=True)

    def __init__(self, state_size: int = 16, message_size: int = 8, *, key: jax.Array):
        k_fwd, k_bwd, k_h, k_out_f, k_out_b = jax.random.split(key, 5)
        fan_in = 2 * message_size + state_size
        scale = 1.0 / jnp.sqrt(fan_in)
        gates = 4 * state_size
        self.w_fwd = scale * normal(k_fwd, (message_size, gates))
        self.w_bwd = scale * normal(k_bwd, (message_size, gates))
        self.w_h = scale * normal(k_h, (state_size, gates))
        self.bias = jnp.zeros(gates)
        self.out_fwd = eqx.nn.Linear(state_size, message_size, key=k_out_f)
        self.out_bwd = eqx.nn.Linear(state_size, message_size, key=k_out_b)
        self.state_size, self.message_size = state_size, message_size

    def tick(self, fwd: jax.Array, bwd: jax.Array, state: tuple[jax.Array, jax.Array]):
        """One micro-tick of every pair of a layer.

        fwd: (A, message) messages at the input units; bwd: (B, message) at the output
        units; state: (h, c), each (A, B, state). Returns ``(fwd_out (B, message),
        bwd_out (A, message), state)`` with the messages averaged over pairs."""
        h, c = state
        gates = ((fwd @ self.w_fwd)[:, None, :] + (bwd @ self.w_bwd)[None, :, :]
                 + h @ self.w_h + self.bias)
        i, g, f, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f + 5.0) * c + jax.nn.sigmoid(i - 5.0) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        # Lin_f and Lin_b are affine, so the mean of the pairs' messages is the message of
        # their mean state: project (B, s) and (A, s) rather than every pair's (A, B, s).
        fwd_out = h.mean(0) @ self.out_fwd.weight.T + self.out_fwd.bias  # (B, message)
        bwd_out = h.mean(1) @ self.out_bwd.weight.T + self.out_bwd.bias  # (A, message)
        return fwd_out, bwd_out, (h, c)


def init_layer_state(key: jax.Array, n_in: int, n_out: int, state_size: int):
    """Episode start: h = 0; the first half of c's channels ~ N(0, 1/n_in), the rest 0."""
    half = state_size // 2
    c_random = jax.random.normal(key, (n_in, n_out, half)) / jnp.sqrt(n_in)
    c = jnp.concatenate([c_random, jnp.zeros((n_in, n_out, state_size - half))], -1)
    return jnp.zeros((n_in, n_out, state_size)), c


class VSMLState(eqx.Module):
    """Everything a VS-ML network carries from one online step to the next."""

    layers: tuple  # per layer: (h, c), each (n_in, n_out, state)
    bwd: tuple  # per layer: its incoming backward message (n_out, message), from last step


class VSMLNetwork(eqx.Module):
    """Dense VS-ML layers of ``sizes`` (inputs first, classes last), one shared cell.

    ``step(state, x, y) -> (state, logits)`` runs one online step: the layers in order,
    ``ticks`` micro-ticks each; ``x`` enters channel 0 of the first forward message; the
    logits are channel 1 of the last forward message, soft-clipped ``100 tanh(. / 100)``.
    They are produced before ``y`` is used: the error ``softmax(logits) - onehot(y)`` (and,
    with ``feed_label``, the one-hot label) enters channels 0 (and 1) of the last layer's
    backward message at the *next* step, and every layer's backward output reaches the
    layer below at the next step. ``__call__(xs, ys, key)`` runs a whole episode.

    With ``layer_norm``, the messages passed *between* VS-ML layers (forward into layer 2 and
    up, backward into every layer but the last) are normalised over their channels to zero
    mean and unit variance, which keeps deep stacks stable; the input, the prediction and
    the error signal stay raw.
    """

    cell: VSMLCell
    sizes: tuple[int, ...] = eqx.field(static=True)
    ticks: int = eqx.field(static=True)
    feed_label: bool = eqx.field(static=True)
    layer_norm: bool = eqx.field(static=True)

    def __init__(self, sizes, *, state_size: int = 16, message_size: int = 8, ticks: int = 2,
                 feed_label: bool = False, layer_norm: bool = False, key: jax.Array):
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"VS-ML needs at least an input and an output size >= 1, got {sizes}")
        if ticks < 1:
            raise ValueError(f"ticks must be at least 1, got {ticks}")
        self.cell = VSMLCell(state_size, message_size, key=key)
        self.sizes, self.ticks, self.feed_label = sizes, ticks, feed_label
        self.layer_norm = layer_norm

    def init_state(self, key: jax.Array) -> VSMLState:
        keys = jax.random.split(key, len(self.sizes) - 1)
        m = self.cell.message_size
        layers = tuple(init_layer_state(k, n_in, n_out, self.cell.state_size)
                       for k, n_in, n_out in zip(keys, self.sizes[:-1], self.sizes[1:],
                                                 strict=True))
        bwd = tuple(jnp.zeros((n_out, m)) for n_out in self.sizes[1:])
        return VSMLState(layers, bwd)

    def step(self, state: VSMLState, x: jax.Array, y: jax.Array):
        m = self.cell.message_size
        fwd = jnp.zeros((self.sizes[0], m)).at[:, 0].set(x)
        layers, sent_back = [], []
        last = len(state.layers) - 1
        for layer, (hc, bwd_in) in enumerate(zip(state.layers, state.bwd, strict=True)):
            if self.layer_norm:
                fwd = _normalise(fwd) if layer > 0 else fwd
                bwd_in = _normalise(bwd_in) if layer < last else bwd_in
            for _ in range(self.ticks):
                fwd_out, bwd_out, hc = self.cell.tick(fwd, bwd_in, hc)
            fwd = fwd_out
            layers.append(hc)
            sent_back.append(bwd_out)
        logits = 100.0 * jnp.tanh(fwd[:, 1] / 100.0)
        onehot = jax.nn.one_hot(y, self.sizes[-1])
        feedback = jnp.zeros((self.sizes[-1], m)).at[:, 0].set(jax.nn.softmax(logits) - onehot)
        if self.feed_label:
            feedback = feedback.at[:, 1].set(onehot)
        # layer l receives what layer l + 1 sent back; the last layer receives the error
        return VSMLState(tuple(layers), (*sent_back[1:], feedback)), logits

    def __call__(self, xs: jax.Array, ys: jax.Array, key: jax.Array) -> jax.Array:
        """Logits for a stream ``xs`` (T, inputs), ``ys`` (T,), each made before its label."""
        if xs.ndim != 2 or xs.shape[1] != self.sizes[0]:
            raise ValueError(f"inputs have shape {xs.shape}, the network expects "
                             f"(steps, {self.sizes[0]}); project the task's inputs to "
                             f"{self.sizes[0]} features")
        if xs.shape[0] == 0:
            raise ValueError("the episode has 0 steps; give it at least one example")

        def step(state, example):
            return self.step(state, *example)

        _, logits = jax.lax.scan(step, self.init_state(key), (xs, ys))
        return logits


def _normalise(messages: jax.Array) -> jax.Array:
    """Layer normalisation without parameters, over the channels of each unit's message."""
    mean = messages.mean(-1, keepdims=True)
    return (messages - mean) * jax.lax.rsqrt(messages.var(-1, keepdims=True) + 1e-5)


def online_loss(logits: jax.Array, labels: jax.Array):
    """Mean prequential cross-entropy over an episode (each prediction precedes its label).

    logits: (T, classes); labels: (T,). Returns ``(loss, accuracy per step)``."""
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected logits (T, C) and labels (T,), got {logits.shape} and "
                         f"{labels.shape}")
    log_p = jax.nn.log_softmax(logits)
    loss = -jnp.take_along_axis(log_p, labels[:, None], 1).mean()
    return loss, (jnp.argmax(logits, -1) == labels)
