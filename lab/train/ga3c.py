"""GA3C and per-agent A3C on the host: agent threads step their own game, and either share
batched predictions and trainings through queues (GA3C) or each run their own (A3C).

Babaeizadeh, Frosio, Tyree, Clemons & Kautz, "Reinforcement Learning through Asynchronous
Advantage Actor-Critic on a GPU" (ICLR 2017); reference code NVlabs/GA3C.

**GA3C** (``run_ga3c``). Each *agent* steps one game on the host (``suite="minatar"``:
MinAtar's own numpy implementation, ``lab.envs.minatar.HostMinAtar``; ``suite="atari"``: real
Atari through ale-py with the standard preprocessing, ``lab.envs.atari.HostAtari``, and the
Atari torso). To act it puts its
observation on the **prediction queue** and waits; a *predictor* thread takes whatever is
waiting (up to ``prediction_batch`` states), runs one jitted batched forward pass with the
current parameters, samples the actions and hands each agent its action, the value and the
parameters' *version*. After ``t_max`` steps (or the end of an episode) the agent computes
its returns, bootstrapped from the predicted value (``lab.rl.returns``), and puts the
experience on the **training queue**; a *trainer* thread gathers ``training_batch`` steps
from it and takes one jitted RMSProp step on the A3C loss (``lab.rl.a3c``), which makes a new
version. Each step trained on carries the version it acted with, so the **policy lag** of
every update is measured: the version trained minus the version acted with.

Deviations from NVlabs/GA3C: a trainer trains on exactly ``training_batch`` steps (the
remainder waits for its next update) so one update is compiled once; predictions are padded
to a power of two (a few compiled sizes, all compiled before the threads start); agents are
threads of one process (NVlabs/GA3C runs each agent as a process, its predictors and trainers
as threads), so they share one interpreter lock, which bounds how much adding agents helps.

**A3C** (``run_a3c``): the design GA3C replaced. Each agent runs its own forward pass for
every step (batch 1) and its own update on its own ``t_max`` steps; the shared parameters are
updated under a lock (A3C's Hogwild updates have no lock; in one Python process the GIL
serialises them anyway).

**Dynamic adjustment** (``adjust=Adjustment(...)`` in ``run_ga3c``), as NVlabs/GA3C's
``ThreadDynamicAdjustment`` does it: after an initial wait (``initial_wait``,
``DYNAMIC_SETTINGS_INITIAL_WAIT`` = 10 s), draw a move of all three counts at once (agents,
predictors, trainers: each -1, 0 or +1 with equal chance, none below 1; a draw that changes
nothing is drawn again), apply it, count the trainings for ``step_wait`` seconds
(``DYNAMIC_SETTINGS_STEP_WAIT`` = 20 s), and revert the move when that window trained less
than the window before it; then the next move, for the whole run (``RandomWalk`` is the rule,
``_adjuster`` drives it). As in the reference, windows are compared by their *counts* of
trainings, and the first window's baseline is the count since start-up (the initial wait and
whatever start-up cost: with the defaults a 20-s count against a 10-s one, so almost every
first move is kept); after a reverted window the baseline is that rejected window's count;
the draw is the reference's (``integers(3) - 1`` per count, subtracted). Deviations: the
driver wakes at each window's end (``_drive`` sleeps at most until the adjuster is due), so
a window lasts ``step_wait`` to within the threads' scheduling (the reference sleeps
``step_wait`` after adding or removing threads, which it times inside the window before);
``limits`` can cap the counts (the reference has no cap; default none); the generator is a
seeded ``numpy`` Generator, not the global ``np.random``.
Threads follow one pattern: a ``threading.Event`` to stop, every ``Queue.get`` bounded by a
timeout, an exception in any thread is kept and re-raised by the caller once every thread
has been joined, and every thread is joined on every exit path (Stop, an error, Ctrl-C).
"""

import dataclasses
import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import numpy as np

from lab import compile_watch
from lab.envs.minatar import HostMinAtar, MinAtarTask
from lab.rl.returns import bootstrapped_returns
from lab.train.a2c import Hyper, init_model, loss_on_steps, optimizer

POLL = 0.05  # seconds a thread blocks on a queue before it checks whether to stop
SUITES = {"minatar": "minatar", "atari": "atari"}  # host games -> the torso made for them


@dataclasses.dataclass(frozen=True)
class GA3CConfig:
    """The host executions' settings (GA3C and per-agent A3C)."""

    game: str = "breakout"
    sticky: float = 0.0
    suite: str = "minatar"
    """Whose games: ``"minatar"`` (10x10 grids) or ``"atari"`` (ale-py, 84x84x4 frames)."""
    agents: int = 16
    predictors: int = 1
    """Predictor threads (GA3C only)."""
    trainers: int = 1
    """Trainer threads (GA3C only)."""
    t_max: int = 5
    prediction_batch: int = 32
    """Most states one forward pass takes (GA3C only)."""
    training_batch: int = 40
    """Steps per update (GA3C only); A3C updates on each agent's own t_max steps."""
    hyper: Hyper = Hyper()

    def __post_init__(self):
        for name in ("agents", "predictors", "trainers", "t_max", "prediction_batch",
                     "training_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.suite not in SUITES:
            raise ValueError(f"unknown suite {self.suite!r}; choose one of {', '.join(SUITES)}")
        if self.hyper.torso != SUITES[self.suite]:
            raise ValueError(f"{self.suite} games take the {SUITES[self.suite]!r} torso, got "
                             f"{self.hyper.torso!r}; set Hyper(torso={SUITES[self.suite]!r})")
        _ = self.task  # an unknown game fails here, before any work

    @property
    def task(self):
        """The game's shapes: a ``MinAtarTask`` or an ``lab.envs.atari.AtariGame``."""
        if self.suite == "atari":
            from lab.envs.atari import AtariGame

            return AtariGame(self.game, self.sticky)
        return MinAtarTask(self.game, self.sticky)

    def host_env(self, seed: int):
        """The game stepped on the host: ``reset() -> obs``, ``step(a) -> (obs, step)``."""
        if self.suite == "atari":
            from lab.envs.atari import HostAtari

            return HostAtari(self.game, self.sticky, seed=seed)
        return HostMinAtar(self.game, self.sticky, seed=seed)


class Experience(NamedTuple):
    """One agent's rollout of up to t_max steps, ready to train on."""

    obs: np.ndarray  # (n, H, W, C)
    action: np.ndarray  # (n,) int32
    g: np.ndarray  # (n,) bootstrapped returns
    version: np.ndarray  # (n,) the parameters' version each action was chosen with


class Stats:
    """Counters and samples the threads write and the caller reads (under one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.start = time.perf_counter()
        self.held = 0.0  # seconds the workers were held while a callback ran
        self.queues: dict[str, queue.Queue] = {}  # GA3C's queues, for their lengths
        self.env_steps = self.predictions = self.trainings = 0
        self.episodes: list[tuple[float, int, float]] = []  # (seconds, env steps, return)
        self.lags: list[np.ndarray] = []  # per update: version trained - version acted
        self.batch_sizes: list[int] = []  # states per forward pass
        self.latencies: list[float] = []  # seconds from a state queued to its action back

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def seconds(self) -> float:
        """Seconds the workers ran (time held by a callback excluded)."""
        return time.perf_counter() - self.start - self.held

    def queue_lengths(self) -> dict[str, int]:
        return {name: q.qsize() for name, q in self.queues.items()}


class Params:
    """The shared parameters and their version: updates swap both under a lock; readers
    take a consistent (params, version) pair."""

    def __init__(self, model, opt_state):
        self.lock = threading.Lock()
        self.model, self.opt_state, self.version = model, opt_state, 0

    def read(self) -> tuple[Any, int]:
        with self.lock:
            return self.model, self.version

    def apply(self, update: Callable, *batch) -> np.ndarray:
        """Take one update on ``batch`` (``update(model, opt_state, *batch) -> (model,
        opt_state)``); returns the lags of its steps (``batch[-1]`` holds their versions)."""
        with self.lock:
            self.model, self.opt_state = update(self.model, self.opt_state, *batch[:-1])
            lags = lags_of(batch[-1], self.version)
            self.version += 1
        return lags


def lags_of(versions_acted: np.ndarray, version_trained: int) -> np.ndarray:
    """Policy lag of each step: how many updates its parameters trail the trained ones."""
    return version_trained - np.asarray(versions_acted)


# --- the jitted pieces, compiled once before any thread starts ---------------------------------

def _buckets(most: int) -> list[int]:
    """Powers of two up to the first one at least ``most``."""
    return [2 ** i for i in range(int(np.ceil(np.log2(max(most, 1)))) + 1)]


class Compiled(NamedTuple):
    forward: Callable  # (model, obs (B, ...)) -> (probs, values)
    update: Callable  # (model, opt_state, obs, action, g, mask) -> (model, opt_state)
    returns: Callable  # (reward, discount, end, v_next) (t_max,) -> g


@functools.lru_cache(maxsize=16)
def compile_all(hyper: Hyper, task, t_max: int, update_sizes: tuple[int, ...],
                forward_sizes: tuple[int, ...]) -> Compiled:
    """Compile every function the threads call, at every size they will call it with, for
    ``task``'s shapes; the same settings get the same compiled functions (a sweep over agent
    counts compiles once)."""
    opt = optimizer(hyper)
    model = init_model(hyper, task, jax.random.key(0))  # for the shapes only
    opt_state = opt.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def forward(model, obs):
        logits, v = jax.vmap(model)(obs)
        return jax.nn.softmax(logits), v

    @eqx.filter_jit
    def update(model, opt_state, obs, action, g, mask):
        grads = eqx.filter_grad(lambda m: loss_on_steps(hyper, m, obs, action, g, mask)[0])(
            model)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state

    returns = jax.jit(bootstrapped_returns)
    # Called here with what the threads pass, numpy arrays of their dtypes: to jit's
    # dispatch a numpy array and a jax.Array of one shape are two signatures, and one not
    # seen here would be looked up in JAX's Python caches inside a timed run (and traced
    # again once those had evicted it: ``compile_watch`` saw that in the test suite).
    shape = task.obs_shape
    for n in forward_sizes:
        forward(model, np.zeros((n, *shape), np.float32))
    for n in update_sizes:
        update(model, opt_state, np.zeros((n, *shape), np.float32), np.zeros(n, np.int32),
               np.zeros(n, np.float32), np.ones(n, np.float32))
    for n in range(1, t_max + 1):  # an episode can end after any step of a rollout
        returns(np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, bool),
                np.zeros(n, np.float32))
    return Compiled(forward, update, returns)


def take_batch(source: queue.Queue, most: int, timeout: float = POLL) -> list:
    """Whatever is waiting on ``source``, up to ``most`` items: blocks (at most ``timeout``
    seconds) for the first, then takes the others without waiting. [] if nothing came."""
    try:
        batch = [source.get(timeout=timeout)]
    except queue.Empty:
        return []
    while len(batch) < most:
        try:
            batch.append(source.get_nowait())
        except queue.Empty:
            break
    return batch


def sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``probs`` (inverse-CDF sampling)."""
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random((len(probs), 1)) * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=-1), probs.shape[-1] - 1).astype(np.int32)


# --- threads --------------------------------------------------------------------------------

class Threads:
    """A group of worker threads with one shared stop event and one error slot; a thread
    can also be retired alone (the dynamic adjustment), and all can be held (``go``
    cleared) while the caller's callback runs, so a paused panel pauses the workers."""

    def __init__(self):
        self.stop = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.errors: list[BaseException] = []
        self.pools: dict[str, list[tuple[threading.Thread, threading.Event]]] = {}

    def start(self, pool: str, target: Callable[[threading.Event], None]) -> None:
        retire = threading.Event()

        def run():
            try:
                target(retire)
            except BaseException as err:  # noqa: BLE001 - reported to the caller
                self.errors.append(err)
                self.stop.set()

        thread = threading.Thread(target=run, name=f"{pool}-{len(self.pools.get(pool, []))}",
                                  daemon=True)
        self.pools.setdefault(pool, []).append((thread, retire))
        thread.start()

    def retire(self, pool: str) -> None:
        """Stop the newest thread of ``pool`` and wait for it."""
        thread, retire = self.pools[pool].pop()
        retire.set()
        thread.join()

    def count(self, pool: str) -> int:
        return len(self.pools.get(pool, []))

    def running(self, retire: threading.Event) -> bool:
        """False once the thread should end; while the workers are held, waits."""
        while not self.go.wait(POLL):
            if self.stop.is_set() or retire.is_set():
                return False
        return not (self.stop.is_set() or retire.is_set())

    def join(self) -> None:
        """Stop every thread and wait for all of them."""
        self.stop.set()
        self.go.set()
        for thread, retire in itertools.chain.from_iterable(self.pools.values()):
            retire.set()
            thread.join()
        self.pools.clear()


class Stopped(Exception):
    """Raised inside an agent when the run stops while it waits for an action."""


def agent_loop(index: int, config: GA3CConfig, jitted: Compiled, act: Callable,
               submit: Callable, stats: Stats, keep_going: Callable[[], bool]) -> None:
    """One agent: step its game with actions from ``act(obs) -> (action, value, version)``
    and ``submit`` each rollout of up to ``t_max`` steps as an ``Experience``, its returns
    bootstrapped from the value of the state after it (the value the next action's
    prediction brings; the final observation's after a truncation; 0 after a termination).
    Returns when ``keep_going()`` turns false or ``act`` raises ``Stopped``."""
    env = config.host_env(seed=index)
    gamma, rows = config.hyper.gamma, []  # rows: (obs, action, reward, terminated, version)

    def finish(v_next: float) -> None:
        nonlocal rows
        reward = np.array([r[2] for r in rows], np.float32)
        discount = gamma * (1.0 - np.array([r[3] for r in rows], np.float32))
        n = len(rows)
        end, v = np.arange(n) == n - 1, np.where(np.arange(n) == n - 1, v_next, 0.0)
        g = np.asarray(jitted.returns(reward, discount, end, v.astype(np.float32)))
        submit(Experience(np.stack([r[0] for r in rows]), np.array([r[1] for r in rows],
                          np.int32), g, np.array([r[4] for r in rows])))
        rows = []

    obs, episode_return = env.reset(), 0.0
    try:
        while keep_going():
            action, value, version = act(obs)
            if len(rows) == config.t_max:
                finish(value)
            obs2, step = env.step(action)
            rows.append((obs, action, float(step.reward), step.terminated, version))
            episode_return += float(step.reward)
            stats.add(env_steps=1)
            if step.terminated or step.truncated:
                finish(0.0 if step.terminated else act(step.final_obs)[1])
                with stats.lock:
                    stats.episodes.append((stats.seconds(), stats.env_steps, episode_return))
                episode_return = 0.0
            obs = obs2
    except Stopped:
        return


class Result(NamedTuple):
    """What a host run measured."""

    model: Any  # the final network
    seconds: float
    env_steps: int
    predictions: int
    trainings: int
    episodes: np.ndarray  # (E, 3): seconds, environment steps, return of each episode
    lags: np.ndarray  # policy lag of every step trained on
    batch_sizes: np.ndarray  # states per forward pass
    latencies: np.ndarray  # seconds from a state queued to its action back
    trace: np.ndarray  # the dynamic adjustment, one row per window: (W, 6) seconds at its
    #                    end, agents, predictors, trainers during it, trainings per second,
    #                    1 if its move was kept else 0 (row 0: the initial wait, kept);
    #                    empty when off
    compiled_while_timed: dict | None = None  # what JAX traced or compiled while the
    #                    workers ran (``lab.compile_watch``; everything is compiled before)

    def rate(self, name: str) -> float:
        """``env_steps``, ``predictions`` or ``trainings`` per second."""
        return getattr(self, name) / self.seconds


def _result(params: Params, stats: Stats, trace: list, seen: compile_watch.Compiled
            ) -> Result:
    with stats.lock:
        return Result(params.read()[0], stats.seconds(), stats.env_steps, stats.predictions,
                      stats.trainings, np.array(stats.episodes).reshape(-1, 3),
                      np.concatenate(stats.lags) if stats.lags else np.zeros(0, int),
                      np.array(stats.batch_sizes, int), np.array(stats.latencies),
                      np.array(trace, float).reshape(-1, TRACE_COLUMNS), seen.as_dict())


def _drive(threads: Threads, stats: Stats, *, env_steps: int | None, seconds: float | None,
           callback: Callable | None, every: float, tick: Callable[[], float] | None = None
           ) -> None:
    """Wait until ``env_steps`` or ``seconds`` is reached, a thread fails, or ``callback``
    returns False; call ``tick`` and ``callback(stats)`` every ``every`` seconds (sooner
    when ``tick`` returns fewer seconds until it is due). The
    workers are held while the callback runs (it may block: a paused panel), and that time
    is not counted in ``stats.seconds()``."""
    if env_steps is None and seconds is None:
        raise ValueError("give env_steps or seconds: when the run ends")
    wait = every
    while not threads.stop.wait(wait):
        # the adjuster says when its window ends: wake then, so each window lasts its length
        wait = every if tick is None else max(1e-3, min(every, tick()))
        if callback is not None:
            held = time.perf_counter()
            threads.go.clear()
            try:
                go_on = callback(stats)
            finally:
                threads.go.set()
                stats.held += time.perf_counter() - held
            if go_on is False:
                return
        if (env_steps is not None and stats.env_steps >= env_steps) or (
                seconds is not None and stats.seconds() >= seconds):
            return


def run_ga3c(config: GA3CConfig, key: jax.Array, *, env_steps: int | None = None,
             seconds: float | None = None, adjust: "Adjustment | None" = None,
             callback: Callable | None = None, every: float = 0.5, seed: int = 0) -> Result:
    """GA3C with ``config``'s counts until ``env_steps`` or ``seconds``; see the module
    docstring. ``adjust`` turns the dynamic adjustment on (``Adjustment``): the counts then
    start from ``config``'s and follow GA3C's random walk for the whole run."""
    hyper, task = config.hyper, config.task
    model = init_model(hyper, task, key)
    params = Params(model, optimizer(hyper).init(eqx.filter(model, eqx.is_array)))
    sizes = _buckets(config.prediction_batch)
    jitted = compile_all(hyper, task, config.t_max, (config.training_batch,),
                         tuple(sizes))
    predictions, trainings = queue.Queue(), queue.Queue()
    replies: dict[int, queue.Queue] = {}
    stats, threads, rng = Stats(), Threads(), np.random.default_rng(seed)
    stats.queues = {"prediction": predictions, "training": trainings}
    counter = itertools.count()

    def predictor(retire):
        while threads.running(retire):
            batch = take_batch(predictions, config.prediction_batch)
            if not batch:
                continue
            n = len(batch)
            size = next(b for b in sizes if b >= n)
            obs = np.zeros((size, *task.obs_shape), np.float32)
            obs[:n] = np.stack([b[1] for b in batch])
            model, version = params.read()
            probs, values = jitted.forward(model, obs)
            actions = sample(np.asarray(probs)[:n], rng)
            values, now = np.asarray(values), time.perf_counter()
            for j, (agent, _, _) in enumerate(batch):
                replies[agent].put((int(actions[j]), float(values[j]), version))
            with stats.lock:
                stats.predictions += n
                stats.batch_sizes.append(n)
                stats.latencies.extend(now - b[2] for b in batch)

    def trainer(retire):
        pending: list[Experience] = []
        while threads.running(retire):
            try:
                pending.append(trainings.get(timeout=POLL))
            except queue.Empty:
                continue
            if sum(len(e.g) for e in pending) < config.training_batch:
                continue
            steps = Experience(*(np.concatenate(f) for f in zip(*pending, strict=True)))
            b = config.training_batch
            now = Experience(*(f[:b] for f in steps))
            rest = Experience(*(f[b:] for f in steps))
            pending = [rest] if len(rest.g) else []
            lags = params.apply(jitted.update, now.obs, now.action, now.g, np.ones(b, np.float32),
                                now.version)
            with stats.lock:
                stats.trainings += 1
                stats.lags.append(lags)

    def agent(retire):
        index = next(counter)
        replies[index] = queue.Queue()

        def act(obs):
            predictions.put((index, obs, time.perf_counter()))
            while True:
                try:
                    return replies[index].get(timeout=POLL)
                except queue.Empty:
                    if not threads.running(retire):
                        raise Stopped from None

        agent_loop(index, config, jitted, act, trainings.put, stats,
                   lambda: threads.running(retire))

    pools = {"agents": agent, "predictors": predictor, "trainers": trainer}
    counts = {"agents": config.agents, "predictors": config.predictors,
              "trainers": config.trainers}
    trace, tick = [], None
    if adjust is not None:
        walk = RandomWalk(tuple(counts.values()), np.random.default_rng([seed, 1]),
                          adjust.limits)

        def apply(target):
            for pool, n in zip(pools, target, strict=True):
                while threads.count(pool) < n:
                    threads.start(pool, pools[pool])
                while threads.count(pool) > n:
                    threads.retire(pool)

        tick = _adjuster(walk, adjust, lambda: (stats.seconds(), stats.trainings), apply,
                         trace)
    with compile_watch.watch("a GA3C run") as seen:
        try:
            for pool, n in counts.items():
                for _ in range(n):
                    threads.start(pool, pools[pool])
            _drive(threads, stats, env_steps=env_steps, seconds=seconds, callback=callback,
                   every=every if adjust is None else min(every, adjust.step_wait), tick=tick)
        finally:
            threads.join()
    if threads.errors:
        raise threads.errors[0]
    return _result(params, stats, trace, seen)


TRACE_COLUMNS = 6  # Result.trace: seconds, agents, predictors, trainers, trainings/s, kept


@dataclasses.dataclass(frozen=True)
class Adjustment:
    """GA3C's dynamic adjustment; the defaults are NVlabs/GA3C's (``Config.py``)."""

    step_wait: float = 20.0
    """Seconds each move is measured for (``DYNAMIC_SETTINGS_STEP_WAIT``)."""
    initial_wait: float = 10.0
    """Seconds before the first move (``DYNAMIC_SETTINGS_INITIAL_WAIT``); the trainings
    counted since start-up are the first move's baseline."""
    limits: tuple[int, int, int] | None = None
    """Most agents, predictors and trainers (None: no cap, as in the reference)."""

    def __post_init__(self):
        if self.step_wait <= 0 or self.initial_wait < 0:
            raise ValueError(f"step_wait must be positive and initial_wait at least 0, got "
                             f"{self.step_wait} and {self.initial_wait}")
        if self.limits is not None and (len(self.limits) != 3 or min(self.limits) < 1):
            raise ValueError(f"limits must be [agents, predictors, trainers], each at least "
                             f"1, got {self.limits}")


@dataclasses.dataclass
class RandomWalk:
    """The adjustment's rule, without threads or clocks (so a fake throughput can drive
    it): ``propose()`` moves the counts, ``judge(count)`` keeps or reverts the move once its
    window's count of trainings is known (NVlabs/GA3C ``random_walk`` and ``run``)."""

    counts: tuple[int, int, int]  # agents, predictors, trainers asked for now
    rng: np.random.Generator
    limits: tuple[int, int, int] | None = None
    previous: float | None = None  # trainings counted in the window before
    before: tuple[int, int, int] | None = None  # the counts before the move on trial

    def propose(self) -> tuple[int, int, int]:
        """The reference's draw: a direction of -1, 0 or +1 per count (``integers(3) - 1``,
        for trainers, predictors and agents in that order), subtracted, none below 1 (nor
        above its limit); a draw that changes nothing is drawn again at once. Returns the
        new counts."""
        top = self.limits or (np.inf,) * 3
        while True:
            # the reference's order: trainers, predictors, agents (ours: agents first)
            direction = (self.rng.integers(3, size=3) - 1)[::-1]
            new = tuple(int(min(max(1, c - d), t))
                        for c, d, t in zip(self.counts, direction, top, strict=True))
            if new != self.counts:
                self.before, self.counts = self.counts, new
                return new

    def judge(self, count: float) -> bool:
        """The move's window trained ``count`` times: revert it if that is fewer than the
        window before (the reference's ``cur_count < old_count``: ties keep it). This
        window becomes the next one's baseline either way. Returns whether it was kept."""
        kept = self.previous is None or count >= self.previous
        if not kept:
            self.counts = self.before
        self.previous = count
        return kept


def _adjuster(walk: RandomWalk, adjust: Adjustment, reading: Callable[[], tuple[float, int]],
              apply: Callable[[tuple[int, int, int]], None], trace: list
              ) -> Callable[[], float]:
    """The adjustment as a ``tick`` for ``_drive``: ``reading()`` gives (seconds, trainings
    so far), ``apply(counts)`` makes the thread pools that size. After ``initial_wait`` the
    first move, its baseline every training since this was made (start-up); at the end of
    each ``step_wait`` window the verdict on the move, by count, and the next move. Each
    window is a row of ``trace`` (``Result.trace``'s columns: the rate is shown, the count
    decides). A tick returns the seconds until the window ends, for the driver's sleep."""
    since, done = reading()
    state = {"since": since, "trainings": done, "window": adjust.initial_wait, "first": True}

    def tick() -> float:
        now, trainings = reading()
        left = state["window"] - (now - state["since"])
        if left > 0:
            return left
        count = trainings - state["trainings"]
        rate = count / max(now - state["since"], 1e-9)
        during = walk.counts
        if state["first"]:  # no move yet: the count since start-up is the first baseline
            walk.previous, kept = count, True
        else:
            kept = walk.judge(count)
        trace.append((now, *during, rate, float(kept)))
        apply(walk.propose())
        state["since"], state["trainings"] = reading()
        state["window"], state["first"] = adjust.step_wait, False
        return state["window"]

    return tick


def run_a3c(config: GA3CConfig, key: jax.Array, *, env_steps: int | None = None,
            seconds: float | None = None, callback: Callable | None = None,
            every: float = 0.5, seed: int = 0) -> Result:
    """Per-agent A3C with ``config.agents`` agents; see the module docstring."""
    hyper, task = config.hyper, config.task
    model = init_model(hyper, task, key)
    params = Params(model, optimizer(hyper).init(eqx.filter(model, eqx.is_array)))
    jitted = compile_all(hyper, task, config.t_max, (config.t_max,), (1,))
    stats, threads = Stats(), Threads()
    rngs = np.random.default_rng(seed).spawn(config.agents)
    t = config.t_max

    def agent(retire, index):
        def act(obs):
            model, version = params.read()
            probs, values = jitted.forward(model, obs[None])
            stats.add(predictions=1)
            # on the host at once, as GA3C's predictor does: ``values[0]`` would be one more
            # JAX dispatch per step (24 us against numpy's 0.7 here; found by compile_watch)
            return (int(sample(np.asarray(probs), rngs[index])[0]),
                    float(np.asarray(values)[0]), version)

        def submit(e: Experience):
            n, pad = len(e.g), t - len(e.g)
            lags = params.apply(
                jitted.update, np.pad(e.obs, [(0, pad)] + [(0, 0)] * (e.obs.ndim - 1)),
                np.pad(e.action, (0, pad)), np.pad(e.g, (0, pad)),
                (np.arange(t) < n).astype(np.float32), e.version)
            with stats.lock:
                stats.trainings += 1
                stats.lags.append(lags)

        agent_loop(index, config, jitted, act, submit, stats, lambda: threads.running(retire))

    with compile_watch.watch("an A3C run") as seen:
        try:
            for i in range(config.agents):
                threads.start("agents", lambda retire, i=i: agent(retire, i))
            _drive(threads, stats, env_steps=env_steps, seconds=seconds, callback=callback,
                   every=every)
        finally:
            threads.join()
    if threads.errors:
        raise threads.errors[0]
    return _result(params, stats, [], seen)
