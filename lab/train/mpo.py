"""MPO and search-augmented policy improvement on a JAX environment, whole runs inside jit.

One agent with two sources of improvement targets:

- MPO (``depth == 0`` and ``model == "none"``): for each replayed state, ``N`` actions from
  the target policy valued by the target critic (Abdolmaleki et al. 2018);
- local search (``model`` is ``"true"`` or ``"learned"``): the root actions and soft backups of
  ``lab.rl.search.search`` to ``depth`` with the target networks (Springenberg et al. 2020).
  The true model copies the replayed environment state and steps copies with vmap; the
  learned model (``lab.models.policy.DynamicsModel``) is trained by regression on replay.
  ``search_in`` chooses where search is used: in ``"learning"`` (the M-step's targets), in
  ``"acting"`` (the executed action is drawn from the root's ``softmax(Q_hat / eta)``), or
  ``"both"``. At depth 0 the search targets are MPO's exactly (tested).

Both then take the same losses (``lab.rl.mpo.mpo_loss``). The critic regresses n-step returns
bootstrapped with the expectation of the target critic over ``N`` target-policy actions;
target networks are copied every ``target_period`` updates (Acme's MPO). Sampled actions are
clipped to ``[-1, 1]`` before the environment and the critic see them; the log-likelihoods use
the unclipped samples.

``make_run(config, task)`` returns the ``init / interval / evaluate`` functions of one seed,
which ``lab.train.rl_loop.run_seeds`` vmaps over seeds: ``train(config, task, keys)``. With
``mesh=lab.parallel.mesh(devices)`` the seeds are split over the devices (``len(keys)`` a
multiple of ``devices``): each device steps its own seeds' environments, replay and updates.
"""

import dataclasses
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from lab.envs import rollout
from lab.envs.control import ControlTask
from lab.models.policy import DynamicsModel, GaussianPolicy, QCritic, sample_actions
from lab.rl import mpo as mpo_losses
from lab.rl.search import search
from lab.train import nstep_replay
from lab.train.rl_loop import History, run_seeds

MODELS = ("none", "true", "learned")
SEARCH_IN = ("learning", "acting", "both")


@dataclasses.dataclass(frozen=True)
class MPOConfig:
    """Hyperparameters of MPO and of search; the loss defaults are the papers' and Acme's."""

    widths: tuple[int, ...] = (256, 256)
    """Hidden widths of the policy, critic and learned-model torsos."""
    num_samples: int = 20
    """N: actions sampled per state for the E-step (a search's root) and for the critic's
    expectation."""
    branching: int = 4
    """M: actions sampled at every search node below the root."""
    epsilon: float = 0.1
    """E-step bound on ``KL(q || pi_old)``."""
    epsilon_mean: float = 2.5e-3
    """M-step bound on the mean's KL (per action dimension)."""
    epsilon_stddev: float = 1e-6
    """M-step bound on the standard deviation's KL (per action dimension)."""
    per_dim: bool = True
    """One multiplier per action dimension (else one on the summed KL)."""
    init_temperature: float = 1.0
    init_alpha_mean: float = 1.0
    init_alpha_stddev: float = 10.0
    init_stddev: float = 0.7
    """The fresh policy's standard deviation."""
    policy_lr: float = 3e-4
    """Adam learning rate of the policy (Acme: 1e-4; 3e-4 learns Pendulum in fewer steps)."""
    critic_lr: float = 3e-4
    dual_lr: float = 1e-2
    model_lr: float = 1e-3
    discount: float = 0.99
    n_step: int = 5
    """Rewards summed before bootstrapping the critic's target."""
    batch_size: int = 256
    target_period: int = 100
    """Updates between copies of the online networks into the targets."""
    depth: int = 0
    """Search depth d; 0 with ``model == "none"`` is MPO."""
    model: str = "none"
    """``"none"`` (MPO), ``"true"`` (copies of the environment) or ``"learned"``."""
    search_in: str = "learning"
    """Where search is used: ``"learning"``, ``"acting"`` or ``"both"``."""
    total_steps: int = 20_000
    """Environment steps per seed."""
    learning_starts: int = 1_000
    """Environment steps before the first update (the replay fills with the initial policy)."""
    updates_per_step: int = 1
    """Gradient updates per environment step once learning has started."""
    replay_capacity: int = 1_000_000
    eval_every: int = 2_000
    """Environment steps between evaluations; ``total_steps`` must be a multiple."""
    eval_episodes: int = 5
    """Episodes per evaluation, acting with the policy's mean (or the search's best action)."""

    def __post_init__(self):
        check(self)

    @property
    def searches(self) -> bool:
        return self.model != "none"

    @property
    def search_learning(self) -> bool:
        return self.searches and self.search_in in ("learning", "both")

    @property
    def search_acting(self) -> bool:
        return self.searches and self.search_in in ("acting", "both")

    @property
    def num_intervals(self) -> int:
        return self.total_steps // self.eval_every


def check(config: MPOConfig) -> None:
    """One-line errors for configurations that cannot run."""
    for name in ("epsilon", "epsilon_mean", "epsilon_stddev"):
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be > 0 (it bounds a KL), got {getattr(config, name)}")
    if config.depth < 0:
        raise ValueError(f"depth must be >= 0, got {config.depth}")
    if config.model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {config.model!r}")
    if config.search_in not in SEARCH_IN:
        raise ValueError(f"search_in must be one of {', '.join(SEARCH_IN)}, "
                         f"got {config.search_in!r}")
    if config.depth > 0 and config.model == "none":
        raise ValueError(f"depth {config.depth} needs a model to search with: set model to "
                         f"'true' or 'learned' (or depth to 0 for MPO)")
    for name in ("num_samples", "branching", "n_step", "batch_size", "target_period", "total_steps",
                 "updates_per_step", "eval_every", "eval_episodes", "replay_capacity"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    if config.total_steps % config.eval_every:
        raise ValueError(f"total_steps ({config.total_steps}) must be a multiple of eval_every "
                         f"({config.eval_every})")
    if config.model == "learned" and config.learning_starts < config.batch_size:
        raise ValueError(f"a learned-model search cannot start before the model has data: "
                         f"learning_starts ({config.learning_starts}) must be >= batch_size "
                         f"({config.batch_size})")
    if config.learning_starts < config.batch_size:
        raise ValueError(f"learning_starts ({config.learning_starts}) must be >= batch_size "
                         f"({config.batch_size}) so that the first update has a full batch")
    if not 0 < config.discount <= 1:
        raise ValueError(f"discount must be in (0, 1], got {config.discount}")


class Agent(eqx.Module):
    """Networks, targets, duals and optimiser states of one seed."""

    policy: GaussianPolicy
    critic: QCritic
    model: DynamicsModel | None
    target_policy: GaussianPolicy
    target_critic: QCritic
    duals: mpo_losses.Duals
    opt_policy: Any
    opt_critic: Any
    opt_model: Any
    updates: jax.Array


def policy_and_duals_optimizer(policy_lr: float, dual_lr: float) -> optax.GradientTransformation:
    """Adam over a ``(policy, duals)`` pair, with its own learning rate for each."""
    return optax.multi_transform({"policy": optax.adam(policy_lr), "duals": optax.adam(dual_lr)},
                                 ("policy", "duals"))


def copy_on_schedule(updates: jax.Array, period: int, new, old):
    """``new`` when ``updates`` is a multiple of ``period``, else ``old`` (target networks);
    a select, so it runs inside jit and vmap."""
    copy = updates % period == 0
    return jax.tree.map(lambda n, o: jnp.where(copy, n, o) if eqx.is_array(n) else n, new, old)


def _optimizers(config: MPOConfig):
    """Adam for the policy and duals together (two learning rates), critic, model."""
    return (policy_and_duals_optimizer(config.policy_lr, config.dual_lr),
            optax.adam(config.critic_lr), optax.adam(config.model_lr))


def init_agent(config: MPOConfig, task: ControlTask, key: jax.Array) -> Agent:
    k_policy, k_critic, k_model = jax.random.split(key, 3)
    policy = GaussianPolicy(task.obs_dim, task.action_dim, config.widths,
                            init_stddev=config.init_stddev, key=k_policy)
    critic = QCritic(task.obs_dim, task.action_dim, config.widths, key=k_critic)
    model = (DynamicsModel(task.obs_dim, task.action_dim, config.widths, key=k_model)
             if config.model == "learned" else None)
    duals = mpo_losses.init_duals(task.action_dim, temperature=config.init_temperature,
                                  alpha_mean=config.init_alpha_mean,
                                  alpha_stddev=config.init_alpha_stddev,
                                  per_dim=config.per_dim)
    opt_pd, opt_c, opt_m = _optimizers(config)

    def params(module):
        return eqx.filter(module, eqx.is_array)

    return Agent(policy, critic, model, policy, critic, duals,
                 opt_pd.init((params(policy), duals)), opt_c.init(params(critic)),
                 None if model is None else opt_m.init(params(model)),
                 jnp.zeros((), jnp.int32))


def _critic_values(critic: QCritic, obs: jax.Array, actions: jax.Array) -> jax.Array:
    """``(M,)`` critic values of ``(M, D)`` actions (clipped) at one observation."""
    return jax.vmap(critic, in_axes=(None, 0))(obs, jnp.clip(actions, -1.0, 1.0))


def mpo_targets(config: MPOConfig, policy: GaussianPolicy, critic: QCritic, obs: jax.Array,
                key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MPO's E-step samples at one state: ``N`` actions of ``policy``, valued by ``critic``."""
    actions = sample_actions(policy, obs, key, config.num_samples)
    return actions, _critic_values(critic, obs, actions)


def search_targets(config: MPOConfig, task: ControlTask, policy: GaussianPolicy,
                   critic: QCritic, model: DynamicsModel | None, temperature: jax.Array,
                   root: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The search's root actions and ``Q_hat`` from one root: an environment state for the
    true model, an observation for the learned one."""
    if config.model == "true":
        def step(state, action, k):
            state, _, reward, terminated, _ = task.step(state, action, k)
            return state, reward, 1.0 - terminated.astype(jnp.float32)
        observe = task.observe
    else:
        def step(obs, action, k):
            next_obs, reward = model(obs, action)
            return next_obs, reward, jnp.ones(())
        def observe(obs):
            return obs
    return search(root, key, depth=config.depth, temperature=temperature,
                  gamma=config.discount,
                  num_actions=config.num_samples, branching=config.branching,
                  sample=lambda obs, k, n: sample_actions(policy, obs, k, n),
                  critic=lambda obs, a: _critic_values(critic, obs, a), model=step,
                  observe=observe)


def update(config: MPOConfig, task: ControlTask, agent: Agent, batch: nstep_replay.Batch,
           key: jax.Array) -> tuple[Agent, dict]:
    """One update of critic, policy, duals (and learned model); targets copied on schedule."""
    k_next, k_targets = jax.random.split(key)
    b = batch.obs.shape[0]

    # Critic: n-step return bootstrapped with E_{a ~ pi_target}[Q_target(s', a)].
    _, q_next = jax.vmap(lambda o, k: mpo_targets(config, agent.target_policy,
                                                  agent.target_critic, o, k))(
        batch.bootstrap_obs, jax.random.split(k_next, b))
    target = batch.returns + batch.bootstrap_discount * jnp.mean(q_next, axis=1)

    def critic_loss(critic):
        q = jax.vmap(critic)(batch.obs, batch.action)
        return 0.5 * jnp.mean((q - jax.lax.stop_gradient(target)) ** 2)

    # E-step targets from the target networks: MPO samples or a search.
    target_keys = jax.random.split(k_targets, b)
    if config.search_learning:
        temperature = jax.lax.stop_gradient(mpo_losses.dual(agent.duals.temperature))
        root = batch.state if config.model == "true" else batch.obs
        actions, q_values = jax.vmap(lambda r, k: search_targets(
            config, task, agent.target_policy, agent.target_critic, agent.model, temperature,
            r, k))(root, target_keys)
    else:
        actions, q_values = jax.vmap(lambda o, k: mpo_targets(
            config, agent.target_policy, agent.target_critic, o, k))(batch.obs, target_keys)
    mean_old, stddev_old = jax.vmap(agent.target_policy)(batch.obs)

    def policy_loss(policy_and_duals):
        policy, duals = policy_and_duals
        mean, stddev = jax.vmap(policy)(batch.obs)
        return mpo_losses.mpo_loss(q_values, actions, mean, stddev, mean_old, stddev_old,
                                   duals, epsilon=config.epsilon,
                                   epsilon_mean=config.epsilon_mean,
                                   epsilon_stddev=config.epsilon_stddev)

    opt_pd, opt_c, opt_m = _optimizers(config)
    c_loss, c_grads = eqx.filter_value_and_grad(critic_loss)(agent.critic)
    c_updates, opt_critic = opt_c.update(c_grads, agent.opt_critic)
    critic = eqx.apply_updates(agent.critic, c_updates)

    (p_loss, aux), pd_grads = eqx.filter_value_and_grad(policy_loss, has_aux=True)(
        (agent.policy, agent.duals))
    pd_updates, opt_policy = opt_pd.update(pd_grads, agent.opt_policy)
    policy, duals = eqx.apply_updates((agent.policy, agent.duals), pd_updates)

    model, opt_model, m_loss = agent.model, agent.opt_model, jnp.full((), jnp.nan)
    if config.model == "learned":
        def model_loss(model):
            next_obs, reward = jax.vmap(model)(batch.obs, batch.action)
            return (jnp.mean(jnp.sum((next_obs - batch.next_obs) ** 2, axis=1))
                    + jnp.mean((reward - batch.reward) ** 2))
        m_loss, m_grads = eqx.filter_value_and_grad(model_loss)(agent.model)
        m_updates, opt_model = opt_m.update(m_grads, agent.opt_model)
        model = eqx.apply_updates(agent.model, m_updates)

    updates = agent.updates + 1
    target_policy, target_critic = copy_on_schedule(
        updates, config.target_period, (policy, critic), (agent.target_policy, agent.target_critic))
    agent = Agent(policy, critic, model, target_policy, target_critic, duals, opt_policy,
                  opt_critic, opt_model, updates)
    metrics = {"critic_loss": c_loss, "policy_loss": p_loss, "model_loss": m_loss,
               "temperature": aux.e_step.temperature, "kl_q": aux.e_step.kl_q,
               "q_mean": aux.e_step.q_mean, "kl_mean": aux.m_step.kl_mean,
               "kl_stddev": aux.m_step.kl_stddev, "alpha_mean": aux.m_step.alpha_mean,
               "alpha_stddev": aux.m_step.alpha_stddev}
    return agent, metrics


def updates(config: MPOConfig, task: ControlTask, agent: Agent, replay: nstep_replay.Replay,
            key: jax.Array) -> tuple[Agent, dict]:
    """``config.updates_per_step`` updates, each on a fresh batch sampled from ``replay``;
    the metrics are their means."""
    def one(agent, k):
        k_batch, k_update = jax.random.split(k)
        batch = nstep_replay.sample(replay, k_batch, config.batch_size, config.n_step,
                                    config.discount)
        return update(config, task, agent, batch, k_update)

    agent, metrics = jax.lax.scan(one, agent, jax.random.split(key, config.updates_per_step))
    return agent, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)


def act(config: MPOConfig, task: ControlTask, agent: Agent, env_state: Any, obs: jax.Array,
        key: jax.Array, *, explore: bool) -> jax.Array:
    """The action in ``[-1, 1]``: a sample of the policy (``explore``) or its mean; with search
    in acting, a draw from (or the argmax of) the root's ``softmax(Q_hat / eta)``."""
    if config.search_acting:
        temperature = mpo_losses.dual(agent.duals.temperature)
        root = env_state if config.model == "true" else obs
        k_search, k_pick = jax.random.split(key)
        actions, q_hat = search_targets(config, task, agent.policy, agent.critic, agent.model,
                                        temperature, root, k_search)
        logits = q_hat / temperature
        index = (jax.random.categorical(k_pick, logits) if explore else jnp.argmax(logits))
        return jnp.clip(actions[index], -1.0, 1.0)
    mean, stddev = agent.policy(obs)
    if explore:
        return jnp.clip(mean + stddev * jax.random.normal(key, mean.shape), -1.0, 1.0)
    return jnp.clip(mean, -1.0, 1.0)


class Run(eqx.Module):
    """One seed's whole training state."""

    agent: Agent
    replay: nstep_replay.Replay
    env_state: Any
    obs: jax.Array
    key: jax.Array


def make_run(config: MPOConfig, task: ControlTask):
    """``(init, interval, evaluate)`` of one seed, for ``lab.train.rl_loop.run_seeds``."""

    def init(key):
        k_agent, k_env, k_run = jax.random.split(key, 3)
        env_state, obs = task.reset(k_env)
        replay = nstep_replay.init(min(config.replay_capacity, config.total_steps),
                                   task.obs_dim, task.action_dim,
                                   env_state if config.model == "true" else None)
        return Run(init_agent(config, task, k_agent), replay, env_state, obs, k_run)

    def env_step(run, step):
        key, k_act, k_step, k_reset, k_update = jax.random.split(run.key, 5)
        learning = step >= config.learning_starts  # not vmapped: the cond skips a branch
        if config.search_acting:  # search acts only once the model and critic have trained
            action = jax.lax.cond(
                learning,
                lambda: act(config, task, run.agent, run.env_state, run.obs, k_act,
                            explore=True),
                lambda: _sample_policy(run.agent.policy, run.obs, k_act))
        else:
            action = act(config, task, run.agent, run.env_state, run.obs, k_act, explore=True)
        env_state, next_obs, reward, terminated, truncated = task.step(run.env_state, action,
                                                                       k_step)
        end = terminated | truncated
        stored = run.env_state if config.model == "true" else None
        replay = nstep_replay.add(run.replay, run.obs, action, reward,
                                  1.0 - terminated.astype(jnp.float32), end, next_obs, stored)
        reset_state, reset_obs = task.reset(k_reset)
        env_state, obs = jax.tree.map(lambda r, s: jnp.where(end, r, s),
                                      (reset_state, reset_obs), (env_state, next_obs))
        agent, metrics = jax.lax.cond(
            learning, lambda: updates(config, task, run.agent, replay, k_update),
            lambda: (run.agent, _nan_metrics(config, task, run.agent, replay, k_update)))
        return Run(agent, replay, env_state, obs, key), metrics

    def interval(run, first_step):
        steps = first_step + jnp.arange(config.eval_every)
        run, metrics = jax.lax.scan(env_step, run, steps)
        return run, jax.tree.map(lambda m: jnp.nanmean(m, axis=0), metrics)

    def evaluate(run):
        key, k_eval = jax.random.split(run.key)
        returns = jax.vmap(lambda k: episode_return(config, task, run.agent, k))(
            jax.random.split(k_eval, config.eval_episodes))
        return eqx.tree_at(lambda r: r.key, run, key), jnp.mean(returns)

    return init, interval, evaluate


def _sample_policy(policy: GaussianPolicy, obs: jax.Array, key: jax.Array) -> jax.Array:
    return jnp.clip(sample_actions(policy, obs, key, 1)[0], -1.0, 1.0)


def _nan_metrics(config, task, agent, replay, key):
    """Metrics shaped like ``updates``' with NaN values (no update ran)."""
    shapes = jax.eval_shape(lambda: updates(config, task, agent, replay, key)[1])
    return jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)


def episode_return(config: MPOConfig, task: ControlTask, agent: Agent, key: jax.Array
                   ) -> jax.Array:
    """The undiscounted return of one evaluation episode (no exploration)."""
    return rollout.episode_return(
        task, lambda state, obs, k: act(config, task, agent, state, obs, k, explore=False), key)


def train(config: MPOConfig, task: ControlTask, keys: jax.Array, *, callback=None,
          mesh: Mesh | None = None, progress: Path | None = None) -> tuple[Run, History]:
    """Train one seed per key together (vmapped), the seeds split over ``mesh``'s ``"data"``
    axis when one is given; see ``lab.train.rl_loop.run_seeds``."""
    init, interval, evaluate = make_run(config, task)
    return run_seeds(init, interval, evaluate, keys, num_intervals=config.num_intervals,
                     steps_per_interval=config.eval_every, callback=callback, mesh=mesh,
                     progress=progress)
