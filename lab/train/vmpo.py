"""V-MPO on a JAX environment, whole runs inside jit.

Song et al. 2019, "V-MPO: On-Policy Maximum a Posteriori Policy Optimization for Discrete and
Continuous Control" (arXiv:1909.12238). On-policy: each seed steps ``num_envs`` copies of the
environment (vmapped) for ``unroll`` steps with the old (target) policy, then takes
``updates_per_rollout`` Adam steps on that rollout:

- the returns are the bootstrapped n-step returns to the end of the rollout
  (``bootstrapped_returns``); an episode that ends inside the rollout is cut there, with a
  bootstrap from the true next observation on truncation (the time limit) and none on
  termination;
- the learned value regresses them, ``0.5 * mean((V(s_t) - G_t)^2)``, and the advantages
  ``G_t - V(s_t)`` (stop-gradient) of the flattened ``unroll * num_envs`` batch go to
  ``lab.rl.vmpo.vmpo_loss`` with the target policy's Gaussians as the old policy;
- the target policy is replaced by the online policy every ``target_period`` updates.

The bootstrap values are the online value network's with stop-gradient, as in the paper: it
is the freshest estimate, and on-policy data needs no target value for stability. The value
and the advantages use the same pre-update ``V``. Sampled actions are clipped to ``[-1, 1]``
for the environment; the log-likelihoods use the unclipped samples. There is no entropy bonus
and no return normalisation (PopArt). Evaluation acts with the clipped policy mean.

``make_run(config, task)`` returns the ``init / interval / evaluate`` functions of one seed,
which ``lab.train.rl_loop.run_seeds`` vmaps over seeds: ``train(config, task, keys)``.

On several devices (``train(..., mesh=...)``) the seeds go over the mesh's ``"data"`` axis and
each seed's ``num_envs`` environments over its ``"model"`` axis (which only ever holds
environments here: the networks are replicated). ``mesh_shape(devices, seeds)`` is the rule:
``g = gcd(devices, seeds)`` devices for the seeds and ``devices // g`` for each seed's
environments, which must divide ``num_envs``. So with ``seeds`` a multiple of ``devices``
every device steps whole seeds (as MPO does); with one seed, all devices split its
environments; 4 seeds on 8 devices are a 4 x 2 grid. The rollouts then cross no device, and
each update's means over the ``unroll * num_envs`` batch are reduced over the seed's
environment devices by XLA.
"""

import dataclasses
import math
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lab import parallel
from lab.envs import rollout
from lab.envs.control import ControlTask
from lab.models.policy import GaussianPolicy, ValueCritic
from lab.rl import mpo as mpo_losses
from lab.rl.returns import bootstrapped_returns
from lab.rl.vmpo import vmpo_loss
from lab.train.mpo import copy_on_schedule, policy_and_duals_optimizer
from lab.train.rl_loop import History, run_seeds


@dataclasses.dataclass(frozen=True)
class VMPOConfig:
    """Hyperparameters of V-MPO: the KL bounds are in the paper's ranges; the sizes and rates
    are CPU-sized for Pendulum-v1 (measured in ``benchmarks/RESULTS.md``, issue 6)."""

    widths: tuple[int, ...] = (64, 64)
    """Hidden widths of the policy and value torsos."""
    num_envs: int = 16
    """Copies of the environment stepped together per seed."""
    unroll: int = 16
    """Steps per rollout; a rollout is one batch of ``num_envs * unroll`` transitions."""
    discount: float = 0.99
    epsilon_eta: float = 0.01
    """Bound on the KL of the non-parametric improved policy (the temperature's dual)."""
    epsilon_mean: float = 0.005
    """Bound on the mean's KL from the target policy (per action dimension)."""
    epsilon_stddev: float = 5e-5
    """Bound on the standard deviation's KL from the target policy (per action dimension)."""
    per_dim: bool = True
    """One multiplier per action dimension (else one on the summed KL)."""
    init_temperature: float = 1.0
    init_alpha_mean: float = 1.0
    init_alpha_stddev: float = 10.0
    init_stddev: float = 0.7
    """The fresh policy's standard deviation."""
    policy_lr: float = 1e-3
    value_lr: float = 3e-3
    """The value regresses unnormalised returns (Pendulum's are about -600), so it needs a
    larger learning rate than the policy."""
    dual_lr: float = 1e-2
    updates_per_rollout: int = 2
    """Adam steps on each rollout (the paper takes 1 on much larger batches)."""
    target_period: int = 10
    """Updates between copies of the online policy into the target (old) policy; the paper
    uses 100 learner steps on large batches, 10 suits small CPU batches."""
    total_steps: int = 1_024_000
    """Environment steps per seed, summed over its ``num_envs`` copies."""
    eval_every: int = 51_200
    """Environment steps per seed between evaluations: a multiple of ``num_envs * unroll``;
    ``total_steps`` must be a multiple of it."""
    eval_episodes: int = 5
    """Episodes per evaluation, acting with the clipped policy mean."""

    def __post_init__(self):
        check(self)

    @property
    def batch_size(self) -> int:
        """Transitions per rollout (and per update): ``num_envs * unroll``."""
        return self.num_envs * self.unroll

    @property
    def rollouts_per_interval(self) -> int:
        return self.eval_every // self.batch_size

    @property
    def num_intervals(self) -> int:
        return self.total_steps // self.eval_every


def check(config: VMPOConfig) -> None:
    """One-line errors for configurations that cannot run."""
    for name in ("epsilon_eta", "epsilon_mean", "epsilon_stddev"):
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be > 0 (it bounds a KL), got {getattr(config, name)}")
    for name in ("num_envs", "unroll", "updates_per_rollout", "target_period", "total_steps",
                 "eval_every", "eval_episodes"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    for name in ("init_temperature", "init_alpha_mean", "init_alpha_stddev", "init_stddev",
                 "policy_lr", "value_lr", "dual_lr"):
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")
    if config.batch_size < 2:
        raise ValueError(f"num_envs * unroll ({config.batch_size}) must be >= 2 so that V-MPO "
                         f"can keep the top half of a batch; raise num_envs or unroll")
    if config.eval_every % config.batch_size:
        raise ValueError(f"eval_every ({config.eval_every}) must be a multiple of num_envs * "
                         f"unroll ({config.batch_size})")
    if config.total_steps % config.eval_every:
        raise ValueError(f"total_steps ({config.total_steps}) must be a multiple of eval_every "
                         f"({config.eval_every})")
    if not 0 < config.discount <= 1:
        raise ValueError(f"discount must be in (0, 1], got {config.discount}")


class Rollout(NamedTuple):
    """``unroll`` steps of ``num_envs`` environments, each field ``(T, N, ...)``."""

    obs: jax.Array
    action: jax.Array
    """The unclipped sample of the target policy."""
    reward: jax.Array
    terminated: jax.Array
    end: jax.Array
    """Terminated or truncated: the environment was reset after this step."""
    next_obs: jax.Array
    """The true next observation (before any reset)."""


class Agent(eqx.Module):
    """Networks, target policy, duals and optimiser states of one seed."""

    policy: GaussianPolicy
    value: ValueCritic
    target_policy: GaussianPolicy
    duals: mpo_losses.Duals
    opt_policy: Any
    opt_value: Any
    updates: jax.Array


def _optimizers(config: VMPOConfig):
    """Adam for the policy and duals together (two learning rates), and for the value."""
    return (policy_and_duals_optimizer(config.policy_lr, config.dual_lr),
            optax.adam(config.value_lr))


def init_agent(config: VMPOConfig, task: ControlTask, key: jax.Array) -> Agent:
    k_policy, k_value = jax.random.split(key)
    policy = GaussianPolicy(task.obs_dim, task.action_dim, config.widths,
                            init_stddev=config.init_stddev, key=k_policy)
    value = ValueCritic(task.obs_dim, config.widths, key=k_value)
    duals = mpo_losses.init_duals(task.action_dim, temperature=config.init_temperature,
                                  alpha_mean=config.init_alpha_mean,
                                  alpha_stddev=config.init_alpha_stddev,
                                  per_dim=config.per_dim)
    opt_pd, opt_v = _optimizers(config)
    return Agent(policy, value, policy, duals,
                 opt_pd.init((eqx.filter(policy, eqx.is_array), duals)),
                 opt_v.init(eqx.filter(value, eqx.is_array)), jnp.zeros((), jnp.int32))


def update(config: VMPOConfig, agent: Agent, rollout: Rollout) -> tuple[Agent, dict]:
    """One Adam step of the value, policy and duals on a rollout; the target policy is
    replaced by the online one when the update count reaches a multiple of
    ``target_period``."""
    opt_pd, opt_v = _optimizers(config)
    t, n = rollout.reward.shape
    v_tp1 = jax.vmap(jax.vmap(agent.value))(rollout.next_obs)
    discount_t = config.discount * (1.0 - rollout.terminated.astype(jnp.float32))
    returns = bootstrapped_returns(rollout.reward, discount_t, rollout.end, v_tp1).reshape(-1)
    obs = rollout.obs.reshape(t * n, -1)
    actions = rollout.action.reshape(t * n, -1)

    def value_loss(value):
        v_t = jax.vmap(value)(obs)
        return 0.5 * jnp.mean((v_t - returns) ** 2), v_t

    (v_loss, v_t), v_grads = eqx.filter_value_and_grad(value_loss, has_aux=True)(agent.value)
    v_updates, opt_value = opt_v.update(v_grads, agent.opt_value)
    value = eqx.apply_updates(agent.value, v_updates)

    advantages = jax.lax.stop_gradient(returns - v_t)
    mean_old, stddev_old = jax.vmap(agent.target_policy)(obs)

    def policy_loss(policy_and_duals):
        policy, duals = policy_and_duals
        mean, stddev = jax.vmap(policy)(obs)
        return vmpo_loss(advantages, actions, mean, stddev, mean_old, stddev_old, duals,
                         epsilon_eta=config.epsilon_eta, epsilon_mean=config.epsilon_mean,
                         epsilon_stddev=config.epsilon_stddev)

    (p_loss, aux), pd_grads = eqx.filter_value_and_grad(policy_loss, has_aux=True)(
        (agent.policy, agent.duals))
    pd_updates, opt_policy = opt_pd.update(pd_grads, agent.opt_policy)
    policy, duals = eqx.apply_updates((agent.policy, agent.duals), pd_updates)

    updates = agent.updates + 1
    target_policy = copy_on_schedule(updates, config.target_period, policy, agent.target_policy)
    agent = Agent(policy, value, target_policy, duals, opt_policy, opt_value, updates)
    metrics = {"value_loss": v_loss, "policy_loss": p_loss, "temperature": aux.temperature,
               "kl_mean": aux.m_step.kl_mean, "kl_stddev": aux.m_step.kl_stddev,
               "alpha_mean": aux.m_step.alpha_mean, "alpha_stddev": aux.m_step.alpha_stddev,
               "advantage": jnp.mean(advantages), "value": jnp.mean(v_t),
               "stddev": jnp.mean(stddev_old, axis=0)}
    return agent, metrics


def act(agent: Agent, obs: jax.Array) -> jax.Array:
    """The evaluation action: the online policy's mean, clipped to ``[-1, 1]``."""
    mean, _ = agent.policy(obs)
    return jnp.clip(mean, -1.0, 1.0)


class Run(eqx.Module):
    """One seed's whole training state; the environment fields are ``(num_envs, ...)``."""

    agent: Agent
    env_state: Any
    obs: jax.Array
    episode_return: jax.Array
    """The running undiscounted return of each environment's current episode."""
    key: jax.Array


def mesh_shape(devices: int, seeds: int) -> tuple[int, int]:
    """``(seed devices, environment devices)``: the seeds over ``gcd(devices, seeds)``
    devices (``"data"``) and each seed's environments over the rest (``"model"``)."""
    data = math.gcd(devices, seeds)
    return data, devices // data


def check_devices(config: VMPOConfig, devices: int, seeds: int) -> None:
    """One-line errors when ``devices`` cannot hold ``seeds`` seeds of ``config``'s layout."""
    envs = mesh_shape(devices, seeds)[1]
    parallel.check_devices(devices, model=envs, seeds=seeds)
    if config.num_envs % envs:
        raise ValueError(f"V-MPO splits each seed's {config.num_envs} environments over "
                         f"devices // gcd(devices, seeds) = {envs} devices, which does not "
                         f"divide them; use devices that divide seeds x {config.num_envs}")


def constrain(run: Run, mesh: Mesh | None) -> Run:
    """Inside jit: the batched run state's seed axis over ``"data"`` and, in the environment
    fields ``(S, num_envs, ...)``, the environment axis over ``"model"``. The identity
    without a mesh."""
    if mesh is None:
        return run
    envs = NamedSharding(mesh, PartitionSpec("data", "model"))
    agent, key = parallel.constrain_batch((run.agent, run.key), mesh)
    env_state, obs, episode_return = jax.tree.map(
        lambda x: jax.lax.with_sharding_constraint(x, envs) if eqx.is_array(x) else x,
        (run.env_state, run.obs, run.episode_return))
    return Run(agent, env_state, obs, episode_return, key)


def make_run(config: VMPOConfig, task: ControlTask):
    """``(init, interval, evaluate)`` of one seed, for ``lab.train.rl_loop.run_seeds``."""

    def init(key):
        k_agent, k_env, k_run = jax.random.split(key, 3)
        env_state, obs = jax.vmap(task.reset)(jax.random.split(k_env, config.num_envs))
        return Run(init_agent(config, task, k_agent), env_state, obs,
                   jnp.zeros((config.num_envs,)), k_run)

    def env_step(policy, env_state, obs, episode_return, key):
        """One step of one environment with the target policy, resetting at episode end."""
        k_act, k_step, k_reset = jax.random.split(key, 3)
        mean, stddev = policy(obs)
        action = mean + stddev * jax.random.normal(k_act, mean.shape)
        next_state, next_obs, reward, terminated, truncated = task.step(
            env_state, jnp.clip(action, -1.0, 1.0), k_step)
        end = terminated | truncated
        total = episode_return + reward
        reset_state, reset_obs = task.reset(k_reset)
        next_state, obs_after = jax.tree.map(lambda r, s: jnp.where(end, r, s),
                                             (reset_state, reset_obs), (next_state, next_obs))
        transition = Rollout(obs, action, reward, terminated, end, next_obs)
        finished = (jnp.where(end, total, 0.0), end.astype(jnp.float32))
        return (next_state, obs_after, jnp.where(end, 0.0, total)), (transition, finished)

    def rollout_and_update(run, _):
        key, k_steps = jax.random.split(run.key)

        def step(carry, k):
            env_state, obs, episode_return = carry
            keys = jax.random.split(k, config.num_envs)
            return jax.vmap(env_step, in_axes=(None, 0, 0, 0, 0))(
                run.agent.target_policy, env_state, obs, episode_return, keys)

        (env_state, obs, episode_return), (rollout, (returns, ends)) = jax.lax.scan(
            step, (run.env_state, run.obs, run.episode_return),
            jax.random.split(k_steps, config.unroll))
        agent, metrics = jax.lax.scan(lambda a, _: update(config, a, rollout), run.agent,
                                      None, length=config.updates_per_rollout)
        metrics = jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)
        metrics["episode_return_sum"] = jnp.sum(returns)
        metrics["episodes"] = jnp.sum(ends)
        return Run(agent, env_state, obs, episode_return, key), metrics

    def interval(run, first_step):
        del first_step  # no schedule: every rollout is followed by its updates
        run, metrics = jax.lax.scan(rollout_and_update, run, None,
                                    length=config.rollouts_per_interval)
        episodes = jnp.sum(metrics.pop("episodes"))
        total = jnp.sum(metrics.pop("episode_return_sum"))
        metrics = jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)
        metrics["train_return"] = jnp.where(episodes > 0, total / jnp.maximum(episodes, 1.0),
                                            jnp.nan)
        return run, metrics

    def evaluate(run):
        key, k_eval = jax.random.split(run.key)
        returns = jax.vmap(lambda k: episode_return(task, run.agent, k))(
            jax.random.split(k_eval, config.eval_episodes))
        return eqx.tree_at(lambda r: r.key, run, key), jnp.mean(returns)

    return init, interval, evaluate


def episode_return(task: ControlTask, agent: Agent, key: jax.Array) -> jax.Array:
    """The undiscounted return of one evaluation episode (the clipped policy mean)."""
    return rollout.episode_return(task, lambda state, obs, k: act(agent, obs), key)


def train(config: VMPOConfig, task: ControlTask, keys: jax.Array, *, callback=None,
          mesh: Mesh | None = None, progress: Path | None = None) -> tuple[Run, History]:
    """Train one seed per key together (vmapped), laid out on ``mesh`` by ``constrain`` when
    one is given (``lab.parallel.mesh(devices, model=mesh_shape(devices, seeds)[1])``); see
    ``lab.train.rl_loop.run_seeds``."""
    init, interval, evaluate = make_run(config, task)
    return run_seeds(init, interval, evaluate, keys, num_intervals=config.num_intervals,
                     steps_per_interval=config.eval_every, callback=callback, mesh=mesh,
                     constrain=constrain, progress=progress)
