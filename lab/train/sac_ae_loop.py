"""SAC-AE training loops: the reference's schedule, on a JAX task inside one jit, or on a
host-side environment (the DeepMind Control Suite) step by step.

The reference schedule (``train.py`` of ``denisyarats/pytorch_sac_ae``), one agent step at a
time: pick the action (uniform in [-1, 1] for the first ``init_steps`` steps, then a sample
of the policy); once ``step >= init_steps`` update the agent, ``init_steps`` times at
``step == init_steps`` and once per step after; step the environment; store the transition;
reset at the end of an episode. Time limits are not terminal: ``not_done`` is always 1, as
the reference stores it for DMC's fixed-length episodes. The agent acts on the last
``num_frames`` frames, stacked by the replay buffer itself (``replay.latest``).

On a JAX task, ``train(env, agent_config, loop_config, key)`` runs the steps between two
evaluations as one ``lax.scan`` inside jit (environment, replay and updates together),
evaluates, and saves a checkpoint if asked. A run stopped at any point and started again
with the same checkpoint, configuration and key continues from the last finished chunk and
ends with exactly the same state and history as an uninterrupted run.

Several devices: ``train`` and ``train_host`` take an optional ``mesh``
(``lab.parallel.mesh``); each update's sampled batch is then split over its ``"data"`` axis
and the agent is replicated (its wide matrices split over ``"model"``), see
``sac_ae.update``. The environment, the replay buffer and the acting stay replicated. With
``mesh=None`` nothing changes.
"""

import dataclasses
import time
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from lab import parallel
from lab.train import checkpoint as checkpoints
from lab.train import replay as replays
from lab.train import sac_ae


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The run around the agent; the defaults are the reference's."""

    steps: int = 100_000
    """Agent steps in all (environment steps are ``steps * action_repeat``)."""
    init_steps: int = 1000
    """Uniformly random actions first; updates start at this step."""
    eval_every: int = 10_000
    """Agent steps between evaluations (and checkpoints); ``steps`` must be a multiple."""
    eval_episodes: int = 10
    """Episodes per evaluation, with the deterministic action ``tanh(mean)``."""
    replay_capacity: int = 100_000
    """Frames the replay buffer holds (one per agent step plus one per episode)."""
    num_frames: int = 3
    """Frames stacked into one observation."""

    def __post_init__(self):
        for name in ("steps", "eval_every", "eval_episodes", "replay_capacity", "num_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.init_steps < 0:
            raise ValueError(f"init_steps must be >= 0, got {self.init_steps}")
        if self.steps % self.eval_every:
            raise ValueError(f"steps ({self.steps}) must be a multiple of eval_every "
                             f"({self.eval_every}); change one of them")


def check(env, agent_config: sac_ae.SACAEConfig, loop: LoopConfig) -> None:
    """Reject a run that cannot work, before anything is built (one-line errors)."""
    if env.image_size < agent_config.min_image_size:
        raise ValueError(f"image size {env.image_size} is too small for "
                         f"{agent_config.num_layers} conv layers: use at least "
                         f"{agent_config.min_image_size}")
    # random steps fill the buffer before the first update samples from it
    if agent_config.batch_size > loop.init_steps:
        raise ValueError(f"batch size {agent_config.batch_size} is larger than the "
                         f"{loop.init_steps} transitions stored before the first update; "
                         f"raise init_steps or lower the batch size")
    if loop.replay_capacity <= loop.init_steps:
        raise ValueError(f"replay capacity {loop.replay_capacity} must exceed init_steps "
                         f"({loop.init_steps})")


class TrainState(eqx.Module):
    """Everything a run carries from one step to the next (and what a checkpoint holds)."""

    agent: sac_ae.AgentState
    replay: replays.Replay
    env_state: Any
    key: jax.Array
    step: jax.Array
    """Agent steps taken (int32)."""
    episode_return: jax.Array
    """Return of the episode in progress."""


class StepLog(NamedTuple):
    """Per agent step; ``episode_return`` is NaN except on the last step of an episode,
    the losses are those of the last update made at that step (NaN if none)."""

    reward: jax.Array
    episode_return: jax.Array
    critic_loss: jax.Array
    actor_loss: jax.Array
    alpha: jax.Array
    entropy: jax.Array
    reconstruction_loss: jax.Array


def obs_shape(env, loop: LoopConfig) -> tuple[int, int, int]:
    return (env.image_size, env.image_size, 3 * loop.num_frames)


def init(env, agent_config: sac_ae.SACAEConfig, loop: LoopConfig,
         key: jax.Array) -> TrainState:
    """A fresh run: agent, empty replay holding the first frame, environment reset."""
    k_agent, k_reset, k_run = jax.random.split(key, 3)
    agent = sac_ae.init(agent_config, k_agent, obs_shape(env, loop), env.action_size)
    env_state, frame = env.reset(k_reset)
    replay = replays.init(loop.replay_capacity, frame.shape, env.action_size)
    return TrainState(agent, replays.start_episode(replay, frame), env_state, k_run,
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))


def _updates(agent_config, loop, agent, replay, step, key, mesh=None):
    """The updates made at ``step`` (none before ``init_steps``); returns the last metrics.
    With a ``mesh`` each sampled batch is split over its ``"data"`` axis."""
    count = jnp.where(step < loop.init_steps, 0,
                      jnp.where(step == loop.init_steps, max(loop.init_steps, 1), 1))

    def one(i, carry):
        agent, _ = carry
        batch = replays.sample(replay, jax.random.fold_in(key, i), agent_config.batch_size,
                               loop.num_frames)
        return sac_ae.update(agent_config, agent, batch, mesh)

    agent, metrics = jax.lax.fori_loop(0, count, one, (agent, sac_ae.no_metrics()))
    # the loop's result (no update at all before init_steps) in the update's layout too
    return parallel.constrain_params(agent, mesh), metrics


def train_step(env, agent_config: sac_ae.SACAEConfig, loop: LoopConfig, state: TrainState,
               mesh: Mesh | None = None) -> tuple[TrainState, StepLog]:
    """One agent step of the reference schedule (act, update, step, store, maybe reset);
    the updates data-parallel over ``mesh`` when one is given."""
    k_act, k_update, k_env, k_reset, k_next = jax.random.split(state.key, 5)
    obs = replays.latest(state.replay, loop.num_frames)
    action = jax.lax.cond(
        state.step < loop.init_steps,
        lambda: jax.random.uniform(k_act, (env.action_size,), minval=-1.0, maxval=1.0),
        lambda: sac_ae.act(state.agent, obs, k_act))
    agent, metrics = _updates(agent_config, loop, state.agent, state.replay, state.step,
                              k_update, mesh)
    env_state, frame, reward, done = env.step(state.env_state, action, k_env)
    replay = replays.add_step(state.replay, action, reward, jnp.ones(()), frame)
    episode_return = state.episode_return + reward

    def reset(args):
        _, replay = args
        env_state, frame = env.reset(k_reset)
        return env_state, replays.start_episode(replay, frame)

    env_state, replay = jax.lax.cond(done, reset, lambda args: args, (env_state, replay))
    log = StepLog(reward, jnp.where(done, episode_return, jnp.nan),
                  metrics.critic.critic_loss, metrics.actor.actor_loss, metrics.actor.alpha,
                  metrics.actor.entropy, metrics.decoder.reconstruction_loss)
    state = TrainState(agent, replay, env_state, k_next, state.step + 1,
                       jnp.where(done, 0.0, episode_return))
    return state, log


@eqx.filter_jit(donate="all")
def run_steps(env, agent_config, loop, state: TrainState, count: int,
              mesh: Mesh | None = None):
    """``count`` agent steps as one ``lax.scan``: ``(state, StepLog of (count,) arrays)``."""
    state, logs = jax.lax.scan(lambda s, _: train_step(env, agent_config, loop, s, mesh),
                               state, length=count)
    # the scan's result in the update's layout (XLA may pick another for the loop carry)
    agent = parallel.constrain_params(state.agent, mesh)
    return dataclasses.replace(state, agent=agent), logs


def place(state: TrainState, mesh: Mesh | None) -> TrainState:
    """A run's state on ``mesh``: the agent by ``parallel.shard_params``, everything else
    (replay, environment, keys) replicated; unchanged when ``mesh`` is None."""
    if mesh is None:
        return state
    return dataclasses.replace(parallel.replicate(state, mesh),
                               agent=parallel.shard_params(state.agent, mesh))


# ---------------------------------------------------------------- evaluation

def _stack_push(stack: jax.Array, frame: jax.Array) -> jax.Array:
    """Drop the oldest frame of an ``(H, W, 3 F)`` stack and append an ``(H, W, 3)`` frame."""
    return jnp.concatenate([stack[..., 3:], frame], axis=-1)


def episode(env, agent: sac_ae.AgentState, key: jax.Array, num_frames: int,
            deterministic: bool = True):
    """One whole episode with the agent acting: ``(return, frames (T + 1, H, W, 3),
    rewards (T,))``."""
    k_reset, k_run = jax.random.split(key)
    env_state, frame = env.reset(k_reset)
    stack = jnp.tile(frame, (1, 1, num_frames))

    def step(carry, k):
        env_state, stack = carry
        action = sac_ae.act(agent, stack, k, deterministic)
        env_state, frame, reward, _ = env.step(env_state, action, k)
        return (env_state, _stack_push(stack, frame)), (frame, reward)

    _, (frames, rewards) = jax.lax.scan(step, (env_state, stack),
                                        jax.random.split(k_run, env.episode_steps))
    return rewards.sum(), jnp.concatenate([frame[None], frames]), rewards


@eqx.filter_jit
def evaluate(env, agent: sac_ae.AgentState, key: jax.Array, episodes: int,
             num_frames: int) -> jax.Array:
    """Returns of ``episodes`` deterministic episodes, ``(episodes,)``."""
    returns, _, _ = jax.vmap(lambda k: episode(env, agent, k, num_frames))(
        jax.random.split(key, episodes))
    return returns


# ---------------------------------------------------------------- whole runs

@dataclasses.dataclass
class History:
    """What a run measured: evaluation returns at ``eval_steps`` and per-step logs."""

    eval_steps: np.ndarray
    """Agent steps at each evaluation, ``(E,)`` (0 first)."""
    eval_returns: np.ndarray
    """``(E, eval_episodes)`` returns."""
    logs: StepLog
    """Per-step numpy arrays of length ``steps``."""
    seconds: float = 0.0
    """Wall-clock time of the training chunks and evaluations (compiles included), summed
    over the processes that ran them (a checkpoint carries it)."""

    def arrays(self):
        """What a checkpoint keeps of the history."""
        return self.eval_returns, self.logs


def _empty_history(loop: LoopConfig) -> History:
    evals = loop.steps // loop.eval_every + 1
    logs = StepLog(*(np.full(loop.steps, np.nan, np.float32) for _ in StepLog._fields))
    return History(np.arange(evals) * loop.eval_every,
                   np.full((evals, loop.eval_episodes), np.nan, np.float32), logs)


def _header(env, agent_config, loop, key) -> dict:
    return {"env": repr(env), "agent": dataclasses.asdict(agent_config),
            "loop": dataclasses.asdict(loop),
            "key": np.asarray(jax.random.key_data(key)).tolist()}


def _resume(checkpoint, state: TrainState, history: History, header: dict):
    """``(state, chunks done)`` from ``checkpoint``, filling ``history`` in place; None
    without a checkpoint to resume."""
    resumed = checkpoints.resume(checkpoint, (state, history.arrays()), **header)
    if resumed is None:
        return None
    (state, (eval_returns, logs)), info = resumed
    history.eval_returns = np.array(eval_returns)
    history.logs = StepLog(*(np.array(x) for x in logs))
    history.seconds = info.get("seconds", 0.0)
    return state, info["done"]


def train(env, agent_config: sac_ae.SACAEConfig, loop: LoopConfig, key: jax.Array, *,
          checkpoint: str | Path | None = None, stop_after: int | None = None,
          on_eval=None, mesh: Mesh | None = None) -> tuple[TrainState, History]:
    """A whole run on a JAX task: evaluate, then ``eval_every`` steps as one jitted scan,
    evaluate, ... With ``checkpoint`` the state and history are saved after every chunk and
    a later call with the same file, configuration and key resumes from there (a finished
    checkpoint returns at once). ``stop_after`` ends this call after that many chunks (the
    tests use it to interrupt a run); ``on_eval(step, returns)`` is called after each
    evaluation (live plots) and stops the run by returning ``False``. With a ``mesh`` the
    updates are data-parallel over it (a checkpoint resumes on any number of devices)."""
    check(env, agent_config, loop)
    state = init(env, agent_config, loop, key)
    history = _empty_history(loop)
    header = _header(env, agent_config, loop, key)
    eval_key = jax.random.fold_in(key, 1)
    done = 0  # chunks finished
    resumed = _resume(checkpoint, state, history, header)
    if resumed is not None:
        state, done = resumed
    else:
        history.eval_returns[0] = np.asarray(evaluate(
            env, state.agent, jax.random.fold_in(eval_key, 0), loop.eval_episodes,
            loop.num_frames))
        if on_eval is not None:
            on_eval(0, history.eval_returns[0])
    state = place(state, mesh)
    chunks = loop.steps // loop.eval_every
    ran = 0
    while done < chunks and (stop_after is None or ran < stop_after):
        start = time.perf_counter()
        state, logs = run_steps(env, agent_config, loop, state, loop.eval_every, mesh)
        span = slice(done * loop.eval_every, (done + 1) * loop.eval_every)
        for field, values in zip(history.logs, logs, strict=True):
            field[span] = np.asarray(values)
        done += 1
        ran += 1
        history.eval_returns[done] = np.asarray(evaluate(
            env, state.agent, jax.random.fold_in(eval_key, done), loop.eval_episodes,
            loop.num_frames))
        history.seconds += time.perf_counter() - start
        if checkpoint is not None:
            checkpoints.save(checkpoint, (state, history.arrays()), done=done,
                             seconds=history.seconds, **header)
        if on_eval is not None and on_eval(done * loop.eval_every,
                                           history.eval_returns[done]) is False:
            break
    return state, history


@eqx.filter_jit
def reconstruct(agent: sac_ae.AgentState, obs: jax.Array) -> jax.Array:
    """Decoder reconstructions of uint8 observations ``(B, H, W, C)`` as uint8 images in the
    5-bit target's scale (``(rec + 0.5) * 255``)."""
    rec = jax.vmap(lambda o: agent.decoder(agent.critic.encoder(o)))(obs)
    return jnp.clip((rec + 0.5) * 255.0, 0, 255).astype(jnp.uint8)


# ---------------------------------------------------------------- host-side environments

@eqx.filter_jit(donate="all")
def _host_store(replay: replays.Replay, action, reward, frame, done, first_frame):
    """``add_step``, then ``start_episode(first_frame)`` if ``done`` (one jitted call)."""
    replay = replays.add_step(replay, action, reward, jnp.ones(()), frame)
    return jax.lax.cond(done, lambda r: replays.start_episode(r, first_frame), lambda r: r,
                        replay)


@eqx.filter_jit
def _host_act(agent, replay, step, key, init_steps: int, num_frames: int, action_size: int):
    obs = replays.latest(replay, num_frames)
    return jax.lax.cond(
        step < init_steps,
        lambda: jax.random.uniform(key, (action_size,), minval=-1.0, maxval=1.0),
        lambda: sac_ae.act(agent, obs, key))


@eqx.filter_jit(donate="all-except-first")
def _host_update(replay, agent, step, key, agent_config, loop, mesh):
    return _updates(agent_config, loop, agent, replay, step, key, mesh)


_act = eqx.filter_jit(sac_ae.act)


def host_episode(env, agent, key, num_frames: int) -> tuple[float, np.ndarray]:
    """One deterministic episode on a host environment: ``(return, frames)``."""
    frame = env.reset()
    stack = jnp.tile(jnp.asarray(frame), (1, 1, num_frames))
    frames, total, done = [frame], 0.0, False
    while not done:
        frame, reward, done = env.step(np.asarray(_act(agent, stack, key, True)))
        stack = _stack_push(stack, jnp.asarray(frame))
        frames.append(frame)
        total += reward
    return total, np.stack(frames)


def train_host(env, eval_env, agent_config: sac_ae.SACAEConfig, loop: LoopConfig,
               key: jax.Array, *, seed: int = 0, checkpoint: str | Path | None = None,
               stop_after: int | None = None, on_eval=None,
               mesh: Mesh | None = None) -> tuple[TrainState, History]:
    """``train`` for a host-side environment (``lab.envs.DMCEnv``): the same schedule, with
    the environment stepped in Python and the agent's work in jitted calls.

    Chunks of ``eval_every`` steps start on an episode boundary and reseed both
    environments from ``(seed, chunk)``, so a resumed run repeats an uninterrupted one. With
    a ``mesh`` the updates are data-parallel over it.
    """
    check(env, agent_config, loop)
    if loop.eval_every % env.episode_steps:
        raise ValueError(f"eval_every ({loop.eval_every}) must be a multiple of the episode "
                         f"length ({env.episode_steps} agent steps) on a host environment")
    k_agent, _, k_run = jax.random.split(key, 3)
    agent = sac_ae.init(agent_config, k_agent, obs_shape(env, loop), env.action_size)
    replay = replays.init(loop.replay_capacity, (env.image_size, env.image_size, 3),
                          env.action_size)
    state = TrainState(agent, replay, None, k_run, jnp.zeros((), jnp.int32),
                       jnp.zeros((), jnp.float32))
    history = _empty_history(loop)
    header = _header(env, agent_config, loop, key) | {"seed": seed}
    done_chunks = 0

    def evaluate_now(chunk):
        eval_env.seed(10_000 * seed + chunk + 5_000)
        k = jax.random.fold_in(jax.random.fold_in(key, 1), chunk)
        returns = [host_episode(eval_env, state.agent, k, loop.num_frames)[0]
                   for _ in range(loop.eval_episodes)]
        history.eval_returns[chunk] = returns
        if on_eval is not None:
            on_eval(chunk * loop.eval_every, history.eval_returns[chunk])

    resumed = _resume(checkpoint, state, history, header)
    if resumed is not None:
        state, done_chunks = resumed
    else:
        evaluate_now(0)
    state = place(state, mesh)
    chunks, ran = loop.steps // loop.eval_every, 0
    while done_chunks < chunks and (stop_after is None or ran < stop_after):
        start = time.perf_counter()
        env.seed(10_000 * seed + done_chunks)
        frame = env.reset()
        agent, replay, key_run = state.agent, state.replay, state.key
        replay = replays.start_episode(replay, jnp.asarray(frame))
        episode_return = 0.0
        for i in range(loop.eval_every):
            step = done_chunks * loop.eval_every + i
            k_act, k_update, key_run = jax.random.split(key_run, 3)
            # arrays, not Python numbers: filter_jit would compile once per distinct value
            step_array = jnp.asarray(step, jnp.int32)
            action = _host_act(agent, replay, step_array, k_act, loop.init_steps,
                               loop.num_frames, env.action_size)
            agent, metrics = _host_update(replay, agent, step_array, k_update, agent_config,
                                          loop, mesh)
            frame, reward, done = env.step(np.asarray(action))
            first = env.reset() if done else frame
            replay = _host_store(replay, action, jnp.asarray(reward, jnp.float32),
                                 jnp.asarray(frame), jnp.asarray(done), jnp.asarray(first))
            episode_return += reward
            logs = history.logs
            logs.reward[step] = reward
            logs.episode_return[step] = episode_return if done else np.nan
            logs.critic_loss[step] = metrics.critic.critic_loss
            logs.actor_loss[step] = metrics.actor.actor_loss
            logs.alpha[step] = metrics.actor.alpha
            logs.entropy[step] = metrics.actor.entropy
            logs.reconstruction_loss[step] = metrics.decoder.reconstruction_loss
            if done:
                episode_return = 0.0
        # the chunk ends on an episode boundary; the next chunk starts a fresh episode, so
        # drop the reset frame stored above (the next chunk stores its own)
        replay = replay._replace(count=replay.count - 1)
        state = TrainState(agent, replay, None, key_run,
                           jnp.asarray((done_chunks + 1) * loop.eval_every, jnp.int32),
                           jnp.zeros((), jnp.float32))
        done_chunks += 1
        ran += 1
        evaluate_now(done_chunks)
        history.seconds += time.perf_counter() - start
        if checkpoint is not None:
            checkpoints.save(checkpoint, (state, history.arrays()), done=done_chunks,
                             seconds=history.seconds, **header)
    return state, history
