"""Meta-training a VS-ML network: meta-gradients or evolution strategies.

The meta-loss is the mean online (prequential) cross-entropy over a batch of episodes,
each a fresh task from a :class:`lab.data.TaskSource`. ``make_meta_train(config, source)``
returns ``meta_train(net, key) -> (net, (losses, accuracies))``: the meta-iterations run
inside ``lax.scan`` (in checkpointed chunks if asked), for either method:

- ``"gradient"``: backpropagation through the episodes, Adam, gradient clipping by
  global norm;
- ``"es"``: antithetic evolution strategies, the population evaluated with ``vmap``,
  Adam on the estimated gradient (Salimans et al. 2017, as used by Kirsch &
  Schmidhuber 2021).

With a ``mesh`` (:func:`lab.parallel.mesh`) the work is split over its ``"data"`` devices
by JAX's sharding: the population's perturbed parameter vectors for ``"es"``, the batch of
tasks for ``"gradient"``; theta and the optimizer state are replicated. Without one
(``None``) everything runs as on one device.
"""

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh

from lab import parallel
from lab.data.tasks import TaskSource
from lab.models.vsml import VSMLNetwork, online_loss
from lab.train import checkpoint as checkpoints

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


def meta_loss(net: VSMLNetwork, source: TaskSource, key: jax.Array, tasks: int,
              mesh: Mesh | None = None):
    """Mean online cross-entropy over ``tasks`` fresh episodes; returns (loss, accuracy).
    With ``mesh`` the episodes are split over its ``"data"`` devices (``tasks`` must
    divide over them); the means are then reduced across devices by XLA."""

    def episode(key):
        k_task, k_state = jax.random.split(key)
        xs, ys = source.sample(k_task)
        loss, correct = online_loss(net(xs, ys, k_state), ys)
        return loss, correct.mean()

    keys = parallel.constrain_batch(jax.random.split(key, tasks), mesh)
    losses, accuracies = jax.vmap(episode)(keys)
    return losses.mean(), accuracies.mean()


def es_gradient(loss_fn, params, key: jax.Array, population: int, sigma: float,
                mesh: Mesh | None = None):
    """Antithetic ES estimate of the gradient of ``loss_fn`` at ``params`` (a pytree).

    For ``population / 2`` directions ``eps ~ N(0, I)``:
    ``g = 1 / (population * sigma) * sum_eps (L(theta + sigma eps) - L(theta - sigma eps)) eps``.
    Returns ``(g, mean loss of the population)``. With ``mesh`` the ``population`` rows of
    perturbed parameters are split over its ``"data"`` devices (``population`` must divide
    over them), each device evaluating its members."""
    flat, unravel = ravel_pytree(params)
    eps = jax.random.normal(key, (population // 2, flat.size), flat.dtype)
    perturbed = parallel.constrain_batch(jnp.concatenate([flat + sigma * eps, flat - sigma * eps]),
                                         mesh)
    losses = jax.vmap(lambda theta: loss_fn(unravel(theta)))(perturbed)
    plus, minus = jnp.split(losses, 2)
    grad = (plus - minus) @ eps / (population * sigma)
    return unravel(grad), losses.mean()


def meta_optimizer(config: MetaConfig) -> optax.GradientTransformation:
    if config.method == "gradient":
        return optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(config.lr))
    return optax.adam(config.lr)


@eqx.filter_jit
def meta_iterations(config: MetaConfig, source: TaskSource, learner, opt_state, key: jax.Array,
                first: jax.Array, count: int, mesh: Mesh | None):
    """Meta-iterations ``first .. first + count - 1`` in one ``lax.scan``. At module level,
    with the configuration and the mesh static and the data traced, so that every call of
    the same configuration, mesh and shapes (seeds, reruns, chunks) shares one compilation."""
    optimizer = meta_optimizer(config)
    params, static = eqx.partition(learner, eqx.is_array)
    # the batch of tasks is split over the devices only where it is not inside the population
    tasks_mesh = mesh if config.method == "gradient" else None

    def loss(params, key):
        return meta_loss(eqx.combine(params, static), source, key, config.tasks, tasks_mesh)

    def iteration(carry, i):
        params, opt_state = parallel.constrain_params(carry, mesh)
        k_iteration = jax.random.fold_in(key, i)
        if config.method == "gradient":
            (value, accuracy), grads = jax.value_and_grad(loss, has_aux=True)(
                params, k_iteration)
        else:
            k_tasks, k_noise = jax.random.split(k_iteration)
            # every member of the population sees the same tasks (common random numbers)
            grads, value = es_gradient(lambda p: loss(p, k_tasks)[0], params, k_noise,
                                       config.population, config.sigma, mesh)
            accuracy = jnp.nan  # not measured for the population
        updates, opt_state = optimizer.update(grads, opt_state, params)
        carry = parallel.constrain_params((optax.apply_updates(params, updates), opt_state), mesh)
        return carry, (value, accuracy)

    (params, opt_state), history = jax.lax.scan(
        iteration, (params, opt_state), first + jnp.arange(count))
    return eqx.combine(params, static), opt_state, history


def make_meta_train(config: MetaConfig, source: TaskSource, mesh: Mesh | None = None):
    """``meta_train(learner, key, *, checkpoint=None, every=None, callback=None) -> (learner,
    (losses, accuracies))``, one value per meta-iteration (numpy arrays).

    ``learner`` is any module with the online interface ``learner(xs, ys, key) -> logits``
    (a :class:`VSMLNetwork`, a :class:`lab.models.MetaRNN`). Meta-iteration ``i`` draws its
    tasks from ``fold_in(key, i)``, so the iterations can run in chunks of ``every``, each
    one ``lax.scan`` inside jit, with the same result as one chunk. With ``checkpoint`` (a
    file path) the state (learner, optimizer, history) is saved after every chunk, and a
    later call with the same path, configuration and key resumes where it stopped; a
    finished checkpoint returns at once.

    With ``callback``, ``callback(done, losses, accuracies, learner)`` is called after every
    chunk with the history so far (``done`` iterations) and the learner then; when it
    returns ``False`` meta-training stops there and returns that learner and the history,
    NaN beyond ``done`` (a checkpoint holds what was done, so a later call resumes).

    With ``mesh`` (:func:`lab.parallel.mesh`) each iteration is split over its ``"data"``
    devices: the ES population (``config.population`` must divide over them) or, for
    ``"gradient"``, the batch of tasks (``config.tasks`` must divide); the learner and the
    optimizer state stay replicated. The result equals the one-device result up to float
    rounding, so a checkpoint resumes on any number of devices.
    """
    if mesh is not None:  # one-line error before any work, as for a notebook's `devices`
        split = {"population": config.population} if config.method == "es" else {
            "tasks": config.tasks}
        parallel.check_devices(mesh.devices.size, mesh.shape["model"], **split)
    optimizer = meta_optimizer(config)
    # the chunk does not depend on the run's length: runs of any length share a compilation
    chunk_config = replace(config, iterations=1)

    def meta_train(learner, key: jax.Array, *, checkpoint: str | Path | None = None,
                   every: int | None = None, callback=None):
        every = config.iterations if every is None else every
        if every < 1:
            raise ValueError(f"checkpoint interval must be at least 1 iteration, got {every}")
        opt_state = optimizer.init(eqx.filter(learner, eqx.is_array))
        history = np.full((2, config.iterations), np.nan, np.float32)
        header = {"config": asdict(config), "key": np.asarray(jax.random.key_data(key)).tolist(),
                  "learner": checkpoints.fingerprint(learner)}
        done = 0
        resumed = checkpoints.resume(checkpoint, (learner, opt_state, history), **header)
        if resumed is not None:
            (learner, opt_state, history), info = resumed
            history, done = np.array(history), info["done"]
        while done < config.iterations:
            count = min(every, config.iterations - done)
            learner, opt_state, (losses, accuracies) = meta_iterations(
                chunk_config, source, learner, opt_state, key, jnp.asarray(done), count, mesh)
            history[:, done:done + count] = np.asarray(losses), np.asarray(accuracies)
            done += count
            if checkpoint is not None:
                checkpoints.save(checkpoint, (learner, opt_state, history), done=done, **header)
            if callback is not None and callback(done, history[0, :done].copy(),
                                                 history[1, :done].copy(), learner) is False:
                break
        return learner, (history[0], history[1])

    return meta_train
