"""A2C with the whole run inside jit: vmapped MinAtar games, the A3C loss, and a ``lag`` that
acts with parameters ``lag`` updates old, to study GA3C's policy lag in isolation.

Each update (``update``): the acting parameters (the oldest of a ring of ``lag + 1``
snapshots of the parameters) step ``envs`` games ``t_max`` steps, sampling actions from
their policy; the learner's current parameters then compute the values, the bootstrapped
returns (``lab.rl.returns``) and the A3C loss (``lab.rl.a3c``) of those ``t_max x envs``
steps, and take one RMSProp step; the new parameters enter the ring. With ``lag = 0`` the
ring holds only the current parameters: plain synchronous A2C. With ``lag = k`` every
experience was collected k updates before the one it trains, as in GA3C where the
predictors' parameters trail the trainers' (no importance correction, as in GA3C).

``make_train(config, task) -> (init, run)``: ``init(key) -> Run``, and ``run(run, n) ->
(run, metrics)`` takes ``n`` updates in one ``lax.scan`` (call it in chunks for live plots;
vmap ``init`` over keys for seeds). The step size and discount live in the ``Run`` (from
``Hyper`` at ``init``): ``with_hyper(run, learning_rate, gamma)`` changes them, so a sweep
vmaps one compiled program over configurations that share ``t_max``. Metrics per update: the
mean return of the episodes that ended in its rollout (NaN when none did) and how many, and
the loss's diagnostics.
"""

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from lab.envs.minatar import MinAtarTask
from lab.models.ga3c import ActorCritic
from lab.rl.a3c import a3c_loss, rmsprop
from lab.rl.returns import bootstrapped_returns


@dataclasses.dataclass(frozen=True)
class Hyper:
    """The loss, optimizer and network every execution shares (jitted A2C, host GA3C, host
    A3C); the defaults are GA3C's."""

    learning_rate: float = 3e-4
    rms_decay: float = 0.99
    rms_eps: float = 0.1
    gamma: float = 0.99
    entropy_cost: float = 0.01
    value_cost: float = 0.5
    log_epsilon: float = 0.0
    """GA3C's epsilon inside log pi (0: exact)."""
    clip_norm: float = 0.0
    """Clip the gradient's global norm to this (0: no clipping, GA3C's default)."""
    torso: str = "minatar"

    def __post_init__(self):
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    """The jitted A2C's settings."""

    envs: int = 16
    """Games stepped in parallel (GA3C's agents)."""
    t_max: int = 5
    """Steps per rollout before an update."""
    lag: int = 0
    """Act with the parameters of ``lag`` updates ago (0: the current ones)."""
    hyper: Hyper = Hyper()

    def __post_init__(self):
        for name in ("envs", "t_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lag < 0:
            raise ValueError(f"lag must be 0 or more updates, got {self.lag}")

    @property
    def steps_per_update(self) -> int:
        """Environment steps per update: ``t_max x envs``."""
        return self.t_max * self.envs


class Run(eqx.Module):
    """Everything one seed's training carries from update to update."""

    model: ActorCritic  # the learner's current network
    opt_state: Any
    ring: Any  # lag + 1 snapshots of the network's arrays, oldest first, stacked
    obs: jax.Array  # (envs, H, W, C)
    env_state: Any
    episode_return: jax.Array  # (envs,) return so far of each game's current episode
    key: jax.Array
    learning_rate: jax.Array  # () the RMSProp step size
    gamma: jax.Array  # () the discount


def with_hyper(run: Run, learning_rate, gamma) -> Run:
    """``run`` with another step size and discount (arrays: vmap over configurations)."""
    return eqx.tree_at(lambda r: (r.learning_rate, r.gamma), run,
                       (jnp.asarray(learning_rate, jnp.float32), jnp.asarray(gamma, jnp.float32)))


class Metrics(NamedTuple):
    episode_return: jax.Array  # mean return of the episodes that ended (NaN if none)
    episodes: jax.Array  # how many ended in this update's rollout
    loss: jax.Array
    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array


def optimizer(hyper: Hyper) -> optax.GradientTransformation:
    opt = rmsprop(hyper.learning_rate, hyper.rms_decay, hyper.rms_eps)
    return optax.chain(optax.clip_by_global_norm(hyper.clip_norm), opt) \
        if hyper.clip_norm > 0 else opt


def init_model(hyper: Hyper, task: MinAtarTask, key: jax.Array) -> ActorCritic:
    return ActorCritic(task.obs_shape, task.num_actions, hyper.torso, key=key)


def loss_on_steps(hyper: Hyper, model: ActorCritic, obs: jax.Array, action: jax.Array,
                  g: jax.Array, mask: jax.Array | None = None):
    """The A3C loss of ``model`` on a flat batch of steps with their returns."""
    logits, v = jax.vmap(model)(obs)
    return a3c_loss(logits, v, action, g, mask, entropy_cost=hyper.entropy_cost,
                    value_cost=hyper.value_cost, log_epsilon=hyper.log_epsilon)


def make_train(config: A2CConfig, task: MinAtarTask):
    """``(init, run)`` for ``config`` on ``task``; see the module docstring."""
    hyper = config.hyper
    opt = optimizer(dataclasses.replace(hyper, learning_rate=1.0))  # scaled by run's below

    def init(key: jax.Array) -> Run:
        k_net, k_env, k_run = jax.random.split(key, 3)
        model = init_model(hyper, task, k_net)
        params = eqx.filter(model, eqx.is_array)
        obs, env_state = jax.vmap(task.reset)(jax.random.split(k_env, config.envs))
        ring = jax.tree.map(lambda p: jnp.stack([p] * (config.lag + 1)), params)
        return Run(model, opt.init(params), ring, obs, env_state, jnp.zeros(config.envs),
                   k_run, jnp.float32(hyper.learning_rate), jnp.float32(hyper.gamma))

    def rollout(run: Run, model: ActorCritic, key: jax.Array):

        def step(carry, key):
            obs, env_state, ret = carry
            k_act, k_env = jax.random.split(key)
            logits, _ = jax.vmap(model)(obs)
            action = jax.random.categorical(k_act, logits)
            next_obs, env_state, s = jax.vmap(task.step)(
                jax.random.split(k_env, config.envs), env_state, action)
            ret = ret + s.reward
            end = s.terminated | s.truncated
            out = (obs, action, s.reward, s.terminated, end, s.final_obs, ret)
            return (next_obs, env_state, jnp.where(end, 0.0, ret)), out

        carry = (run.obs, run.env_state, run.episode_return)
        (obs, env_state, ret), steps = jax.lax.scan(
            step, carry, jax.random.split(key, config.t_max))
        return (obs, env_state, ret), steps

    def loss(model, steps, gamma):
        obs, action, reward, terminated, end, final_obs, _ = steps
        _, v_final = jax.vmap(jax.vmap(model))(final_obs)
        discount = gamma * (1.0 - terminated.astype(jnp.float32))
        g = bootstrapped_returns(reward, discount, end, v_final)  # (t_max, envs)
        n = config.steps_per_update
        return loss_on_steps(hyper, model, obs.reshape(n, *obs.shape[2:]), action.reshape(n),
                             g.reshape(n))

    def update(run: Run, _) -> tuple[Run, Metrics]:
        key, k_roll = jax.random.split(run.key)
        static = eqx.partition(run.model, eqx.is_array)[1]
        acting = eqx.combine(jax.tree.map(lambda r: r[0], run.ring), static)
        (obs, env_state, ret), steps = rollout(run, acting, k_roll)
        (total, aux), grads = eqx.filter_value_and_grad(loss, has_aux=True)(
            run.model, steps, run.gamma)
        updates, opt_state = opt.update(grads, run.opt_state, eqx.filter(run.model,
                                                                         eqx.is_array))
        updates = jax.tree.map(lambda u: run.learning_rate * u, updates)
        model = eqx.apply_updates(run.model, updates)
        ring = jax.tree.map(lambda r, p: jnp.concatenate([r[1:], p[None]]), run.ring,
                            eqx.filter(model, eqx.is_array))
        end, returns = steps[4], steps[6]
        ended = end.sum()
        mean_return = jnp.where(ended > 0, jnp.sum(jnp.where(end, returns, 0.0))
                                / jnp.maximum(ended, 1), jnp.nan)
        metrics = Metrics(mean_return, ended, total, aux.policy_loss, aux.value_loss,
                          aux.entropy)
        return Run(model, opt_state, ring, obs, env_state, ret, key, run.learning_rate,
                   run.gamma), metrics

    def run(state: Run, updates: int) -> tuple[Run, Metrics]:
        return jax.lax.scan(update, state, None, length=updates)

    return init, run
