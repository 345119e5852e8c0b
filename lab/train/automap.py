"""Training a ``Transformer`` under a layout found by the automatic partitioner.

``loss(model, batch)`` is the mean cross-entropy of a batch of token sequences ``(B, L)``
against per-position targets (-1: no loss), the program every layout of notebook 10 is
priced on (``lab.parallel.automap.Scorer``). ``make_step(optimizer, mesh, layout)`` is that
train step jitted:

- ``mesh=None``: on one device, the unsharded reference;
- otherwise through ``lab.parallel.data_parallel`` with ``layout`` in place of its shape
  heuristic: the batch split over ``"data"``, parameters and optimizer state laid out by
  the layout, and the gradients constrained to it inside the step, exactly the program the
  scorer compiled. It returns what the one-device step returns, up to float rounding.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import optax
from jax.sharding import Mesh

from lab import parallel
from lab.parallel.automap import Layout, constrainer, train_step
from lab.train.sequence_parallel import token_sums


def loss(model, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    """Mean cross-entropy over the positions with a target: ``batch = (tokens, targets)``,
    both ``(B, L)``."""
    tokens, targets = batch
    xent, count, _ = token_sums(jax.vmap(model)(tokens), targets)
    return xent / count


def make_step(optimizer: optax.GradientTransformation, mesh: Mesh | None = None,
              layout: Layout | None = None) -> Callable:
    """``step(model, opt_state, batch) -> (model, opt_state, loss)``; see the module
    docstring."""
    if mesh is None:
        return eqx.filter_jit(train_step(loss, optimizer))
    if layout is None:
        raise ValueError("a sharded step needs a layout; pass the one a search found")
    return parallel.data_parallel(train_step(loss, optimizer, constrainer(mesh, layout)), mesh,
                                  layout)
