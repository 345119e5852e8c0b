"""Meta-training a VS-ML network: meta-gradients or evolution strategies.

The meta-loss is the mean online (prequential) cross-entropy over a batch of episodes,
each a fresh task from a :class:`lab.data.TaskSource`. ``make_meta_train(config, source)``
returns ``meta_train(net, key) -> (net, losses)``: every meta-iteration inside one
``lax.scan``, for either method:

- ``"gradient"``: backpropagation through the episodes, Adam, gradient clipping by
  global norm;
- ``"es"``: antithetic evolution strategies, the population evaluated with ``vmap``,
  Adam on the estimated gradient (Salimans et al. 2017, as used by Kirsch &
  Schmidhuber 2021).
"""

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from lab.data.tasks import TaskSource
from lab.models.vsml import VSMLNetwork, online_loss

METHODS = ("gradient", "es")


@dataclass(frozen=True)
class MetaConfig:
    """How theta is meta-trained."""

    method: str = "gradient"
    """'gradient' (backprop through episodes) or 'es' (evolution strategies)."""
    iterations: int = 200
    """Meta-iterations."""
    tasks: int = 8
    """Episodes (tasks) per meta-iteration."""
    lr: float = 1e-3
    """Adam step size on theta: 1e-3 for 'gradient'; the paper uses 0.025 for 'es'."""
    clip: float = 25.0
    """Global-norm gradient clipping ('gradient')."""
    population: int = 64
    """ES population: antithetic pairs, so even (the paper uses 1024)."""
    sigma: float = 0.05
    """ES perturbation scale."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown meta-training method {self.method!r}; "
                             f"choose one of {', '.join(METHODS)}")
        for name in ("iterations", "tasks", "population"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.population % 2:
            raise ValueError(f"ES population must be even (antithetic pairs), got "
                             f"{self.population}; use {self.population + 1}")
        if not (self.lr > 0 and self.sigma > 0):
            raise ValueError(f"lr and sigma must be positive, got {self.lr} and {self.sigma}")


def meta_loss(net: VSMLNetwork, source: TaskSource, key: jax.Array, tasks: int):
    """Mean online cross-entropy over ``tasks`` fresh episodes; returns (loss, accuracy)."""

    def episode(key):
        k_task, k_state = jax.random.split(key)
        xs, ys = source.sample(k_task)
        loss, correct = online_loss(net(xs, ys, k_state), ys)
        return loss, correct.mean()

    losses, accuracies = jax.vmap(episode)(jax.random.split(key, tasks))
    return losses.mean(), accuracies.mean()


def es_gradient(loss_fn, params, key: jax.Array, population: int, sigma: float):
    """Antithetic ES estimate of the gradient of ``loss_fn`` at ``params`` (a pytree).

    For ``population / 2`` directions ``eps ~ N(0, I)``:
    ``g = 1 / (population * sigma) * sum_eps (L(theta + sigma eps) - L(theta - sigma eps)) eps``.
    Returns ``(g, mean loss of the population)``."""
    flat, unravel = ravel_pytree(params)
    eps = jax.random.normal(key, (population // 2, flat.size), flat.dtype)
    perturbed = jnp.concatenate([flat + sigma * eps, flat - sigma * eps])
    losses = jax.vmap(lambda theta: loss_fn(unravel(theta)))(perturbed)
    plus, minus = jnp.split(losses, 2)
    grad = (plus - minus) @ eps / (population * sigma)
    return unravel(grad), losses.mean()


def make_meta_train(config: MetaConfig, source: TaskSource):
    """``meta_train(net, key) -> (net, (losses, accuracies))`` per meta-iteration."""
    if config.method == "gradient":
        optimizer = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(config.lr))
    else:
        optimizer = optax.adam(config.lr)

    @eqx.filter_jit
    def meta_train(net: VSMLNetwork, key: jax.Array):
        params, static = eqx.partition(net, eqx.is_array)

        def loss(params, key):
            return meta_loss(eqx.combine(params, static), source, key, config.tasks)

        def iteration(carry, key):
            params, opt_state = carry
            if config.method == "gradient":
                (value, accuracy), grads = jax.value_and_grad(loss, has_aux=True)(params, key)
            else:
                k_tasks, k_noise = jax.random.split(key)
                # every member of the population sees the same tasks (common random numbers)
                grads, value = es_gradient(lambda p: loss(p, k_tasks)[0], params, k_noise,
                                           config.population, config.sigma)
                accuracy = jnp.nan  # not measured for the population
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (value, accuracy)

        keys = jax.random.split(key, config.iterations)
        (params, _), history = jax.lax.scan(iteration, (params, optimizer.init(params)), keys)
        return eqx.combine(params, static), history

    return meta_train
