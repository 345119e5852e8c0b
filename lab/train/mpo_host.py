"""MPO (and learned-model search) on a host environment such as dm_control, from a thin loop.

The agent is ``lab.train.mpo``'s: ``init_agent``, ``act`` and ``update`` unchanged, with the
schedule of ``mpo.make_run``: act with the exploring policy from step 0, store the transition,
reset at the end of an episode, from ``learning_starts`` on do ``updates_per_step`` updates
per environment step, and evaluate the mean action (``explore=False``) over ``eval_episodes``
episodes at step 0 and every ``eval_every`` steps. Only the environment runs in Python: per
environment step one compiled call stores the transition, runs the updates and picks the next
action, so the host waits on the device once per step. Interval means of the update metrics
are accumulated inside that call, with ``make_run``'s names: the mean over the steps of the
interval that ran updates, NaN where none did (``model_loss`` is NaN without a learned model).

The environment needs ``obs_dim``, ``action_dim``, ``episode_steps``, ``reset() -> obs``,
``step(action) -> (obs, reward, terminated, truncated)`` and ``seed(int)``
(``lab.envs.dmc_states.DMCStates``). Its state cannot be copied inside jit, so a search with
the true model is refused; ``model="learned"`` searches from the observation.

    env, eval_env = make_dmc_states("cartpole_swingup"), make_dmc_states("cartpole_swingup")
    agent, history = train_host(MPOConfig(widths=(64, 64)), env, eval_env, jax.random.key(0))
"""

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab.train import nstep_replay
from lab.train.mpo import Agent, MPOConfig, act, init_agent, updates
from lab.train.rl_loop import History

_SEED_RANGE = 2**31 - 1


class HostRun(eqx.Module):
    """The device side of one seed: agent, replay, key and the interval's metric sums."""

    agent: Agent
    replay: nstep_replay.Replay
    key: jax.Array
    metric_sums: dict
    learning_steps: jax.Array
    """Environment steps of this interval that ran updates (the metrics' denominator)."""


def check_host(config: MPOConfig) -> None:
    """One-line errors for configurations that need the environment inside jit."""
    if config.model == "true":
        raise ValueError("model='true' searches copies of the environment state inside jit, "
                         "which a host environment (MuJoCo) cannot give; use model='learned' "
                         "(search a learned model) or model='none' (MPO)")


def _env_seed(key: jax.Array) -> int:
    return int(jax.random.randint(key, (), 0, _SEED_RANGE))


def make_host_step(config: MPOConfig, env):
    """``(init_run, first_action, step, eval_action)`` for one seed, each jitted.

    ``init_run(agent, replay, key) -> run``; ``first_action(run, obs) -> (run, action)`` at
    step 0; ``step(transition, run) -> (run, action)`` with ``transition = (obs, action,
    reward, terminated, end, next_obs, step)`` stores the transition of environment step
    ``step``, updates if ``step >= learning_starts`` and acts at ``next_obs`` (the reset
    observation after an episode's end) for step ``step + 1``; ``eval_action(agent, obs, key,
    t) -> action`` at step ``t`` of an evaluation episode. Host values are passed as numpy
    arrays, so nothing recompiles; ``step`` donates ``run``'s buffers (the replay is updated
    in place).
    """
    plain = dataclasses.replace(config, model="none", depth=0)

    def explore(agent, obs, step, key):
        if not config.search_acting:
            return act(config, env, agent, None, obs, key, explore=True)
        # search acts only once the model and critic have trained (as in mpo.make_run)
        return jax.lax.cond(
            step >= config.learning_starts,
            lambda: act(config, env, agent, None, obs, key, explore=True),
            lambda: act(plain, env, agent, None, obs, key, explore=True))

    def learn(agent, replay, key):
        return updates(config, env, agent, replay, key)

    def init_run(agent, replay, key):
        shapes = jax.eval_shape(learn, agent, replay, key)[1]
        sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return HostRun(agent, replay, key, sums, jnp.zeros((), jnp.int32))

    @eqx.filter_jit
    def first_action(run, obs):
        key, k_act = jax.random.split(run.key)
        action = explore(run.agent, obs, jnp.zeros((), jnp.int32), k_act)
        return eqx.tree_at(lambda r: r.key, run, key), action

    @eqx.filter_jit(donate="all-except-first")
    def step_fn(transition, run):
        obs, action, reward, terminated, end, next_obs, step = transition
        key, k_update, k_act = jax.random.split(run.key, 3)
        replay = nstep_replay.add(run.replay, obs, action, reward,
                                  1.0 - terminated.astype(jnp.float32), end, next_obs)
        learning = step >= config.learning_starts
        agent, metrics = jax.lax.cond(
            learning, lambda: learn(run.agent, replay, k_update),
            lambda: (run.agent, jax.tree.map(jnp.zeros_like, run.metric_sums)))
        run = HostRun(agent, replay, key, jax.tree.map(jnp.add, run.metric_sums, metrics),
                      run.learning_steps + learning.astype(jnp.int32))
        return run, explore(agent, next_obs, step + 1, k_act)

    @eqx.filter_jit
    def eval_action(agent, obs, key, t):
        return act(config, env, agent, None, obs, jax.random.fold_in(key, t), explore=False)

    return init_run, first_action, step_fn, eval_action


def evaluate(env, eval_action, agent: Agent, key: jax.Array, episodes: int) -> float:
    """Mean undiscounted return of ``episodes`` episodes acting with ``eval_action``."""
    totals = []
    for k_episode in jax.random.split(key, episodes):
        obs, total, done, t = env.reset(), 0.0, False, 0
        while not done:
            action = np.asarray(eval_action(agent, obs, k_episode, np.int32(t)))
            obs, reward, terminated, truncated = env.step(action)
            total, done, t = total + reward, terminated or truncated, t + 1
        totals.append(total)
    return float(np.mean(totals))


def train_host(config: MPOConfig, env, eval_env, key: jax.Array, *,
               callback: Callable[[History], bool | None] | None = None
               ) -> tuple[Agent, History]:
    """Train one seed on ``env``, evaluating on ``eval_env`` (another instance of the same
    task); both are seeded from ``key``.

    Returns the agent and a ``History`` with one seed: returns ``(1, E)``, metrics
    ``(1, E - 1)``, ``seconds`` the wall-clock training time before each evaluation
    (evaluations and compilation excluded; ``compile_seconds`` apart, with the agent's
    initialisation). ``callback(history)`` after each evaluation stops the run by returning
    ``False``.
    """
    return _train(config, env, eval_env, key, {}, callback)


def _train(config, env, eval_env, key, compiled: dict, callback) -> tuple[Agent, History]:
    """``train_host`` with the compiled functions kept in ``compiled`` (filled on first use),
    so that further seeds on the same environments reuse them."""
    check_host(config)
    if eval_env is env:
        raise ValueError("eval_env must be a second environment: evaluating on env would reset "
                         "the training episode")
    k_agent, k_env, k_eval_env, k_run, k_eval = jax.random.split(key, 5)
    env.seed(_env_seed(k_env))
    eval_env.seed(_env_seed(k_eval_env))

    start = time.perf_counter()
    if not compiled:
        compiled["fns"] = make_host_step(config, env)
    init_run, first_action, step_fn, eval_action = compiled["fns"]
    replay = nstep_replay.init(min(config.replay_capacity, config.total_steps), env.obs_dim,
                               env.action_dim)
    run = init_run(init_agent(config, env, k_agent), replay, k_run)
    obs = env.reset()
    if "aot" not in compiled:  # ahead of time, so that compilation is timed apart
        example = (obs, np.zeros(env.action_dim, np.float32), np.float32(0), np.bool_(False),
                   np.bool_(False), obs, np.int32(0))
        compiled["aot"] = (first_action.lower(run, obs).compile(),
                           step_fn.lower(example, run).compile(),
                           eval_action.lower(run.agent, obs, k_eval, np.int32(0)).compile())
    first_action, step_fn, eval_action = compiled["aot"]
    compile_seconds = time.perf_counter() - start

    run, action = first_action(run, obs)
    action = np.asarray(action)
    k_eval, k_now = jax.random.split(k_eval)
    returns = [evaluate(eval_env, eval_action, run.agent, k_now, config.eval_episodes)]
    seconds, metrics, elapsed = [0.0], [], 0.0
    for i in range(config.num_intervals):
        tick = time.perf_counter()
        for step in range(i * config.eval_every, (i + 1) * config.eval_every):
            next_obs, reward, terminated, truncated = env.step(action)
            end = terminated or truncated
            reset_obs = env.reset() if end else next_obs
            run, action = step_fn((obs, action, np.float32(reward), np.bool_(terminated),
                                   np.bool_(end), next_obs, np.int32(step)), run)
            action = np.asarray(action)  # waits for the step's updates
            obs = reset_obs
        elapsed += time.perf_counter() - tick
        means = {name: np.asarray(s / run.learning_steps) for name, s in run.metric_sums.items()}
        run = HostRun(run.agent, run.replay, run.key,
                      jax.tree.map(jnp.zeros_like, run.metric_sums), jnp.zeros((), jnp.int32))
        k_eval, k_now = jax.random.split(k_eval)
        returns.append(evaluate(eval_env, eval_action, run.agent, k_now, config.eval_episodes))
        seconds.append(elapsed)
        metrics.append(means)
        if callback is not None and callback(
                _history(config.eval_every, returns, seconds, compile_seconds, metrics)) is False:
            break
    return run.agent, _history(config.eval_every, returns, seconds, compile_seconds, metrics)


def train_host_seeds(config: MPOConfig, env, eval_env, keys: Sequence[jax.Array], *,
                     callback: Callable[[History], bool | None] | None = None
                     ) -> tuple[list[Agent], History]:
    """``train_host`` for each key, one after another, on the same two environments,
    compiling once.

    The histories are stacked like ``rl_loop.run_seeds``'s: returns ``(S, E)``, metrics
    ``(S, E - 1, ...)``; ``seconds`` and ``compile_seconds`` add up over seeds (the wall-clock
    cost of all seeds together). ``callback`` sees each seed's own history; ``False`` stops
    the run (no further seeds) and every seed is cut to the evaluations all of them reached.
    """
    agents, histories, stopped, compiled = [], [], False, {}

    def seed_callback(history):
        nonlocal stopped
        keep = None if callback is None else callback(history)
        stopped = keep is False
        return keep

    for key in keys:
        agent, history = _train(config, env, eval_env, key, compiled, seed_callback)
        agents.append(agent)
        histories.append(history)
        if stopped:
            break
    return agents, stack_histories(histories)


def stack_histories(histories: Sequence[History]) -> History:
    """One ``History`` of the seeds of several, cut to the shortest; seconds add up."""
    evals = min(len(h.env_steps) for h in histories)
    metrics = {name: np.concatenate([h.metrics[name][:, :evals - 1] for h in histories])
               for name in histories[0].metrics}
    return History(histories[0].env_steps[:evals],
                   np.concatenate([h.returns[:, :evals] for h in histories]),
                   np.sum([h.seconds[:evals] for h in histories], axis=0),
                   float(sum(h.compile_seconds for h in histories)), metrics)


def _history(steps_per_interval: int, returns: list, seconds: list, compile_seconds: float,
             metrics: list[dict[str, Any]]) -> History:
    stacked = {name: np.stack([m[name] for m in metrics])[None] for name in
               (metrics[0] if metrics else {})}
    return History(np.arange(len(returns)) * steps_per_interval, np.asarray(returns)[None],
                   np.asarray(seconds), compile_seconds, stacked)
