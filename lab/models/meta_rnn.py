"""Meta-RNN baseline: an LSTM fed the input and the previous label (Hochreiter et al.
2001; Santoro et al. 2016), meta-trained like VS-ML. Its learning algorithm lives in
128 units of state and roughly 70k parameters that do not share structure across inputs
or classes, which is what VS-ML's weight sharing is meant to improve on."""

import equinox as eqx
import jax
import jax.numpy as jnp


class MetaRNN(eqx.Module):
    """``__call__(xs (T, inputs), ys (T,), key) -> logits (T, classes)``, the same online
    interface as :class:`lab.models.VSMLNetwork`: the prediction at step t sees
    ``x_t`` and ``y_{t-1}``, never ``y_t``."""

    cell: eqx.nn.LSTMCell
    readout: eqx.nn.Linear
    inputs: int = eqx.field(static=True)
    classes: int = eqx.field(static=True)

    def __init__(self, inputs: int, classes: int, hidden: int = 128, *, key: jax.Array):
        k_cell, k_out = jax.random.split(key)
        self.cell = eqx.nn.LSTMCell(inputs + classes, hidden, key=k_cell)
        self.readout = eqx.nn.Linear(hidden, classes, key=k_out)
        self.inputs, self.classes = inputs, classes

    def __call__(self, xs: jax.Array, ys: jax.Array, key: jax.Array) -> jax.Array:
        del key  # the initial state is zero
        if xs.ndim != 2 or xs.shape[1] != self.inputs:
            raise ValueError(f"inputs have shape {xs.shape}, the Meta-RNN expects "
                             f"(steps, {self.inputs})")
        previous = jnp.concatenate([jnp.zeros((1, self.classes)),
                                    jax.nn.one_hot(ys[:-1], self.classes)])

        def step(state, example):
            state = self.cell(jnp.concatenate(example), state)
            return state, self.readout(state[0])

        zeros = jnp.zeros(self.cell.hidden_size)
        _, logits = jax.lax.scan(step, (zeros, zeros), (xs, previous))
        return logits
