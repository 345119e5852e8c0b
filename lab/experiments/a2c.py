"""The jitted A2C on a MinAtar game, one configuration or many at once: the actor-critic
workload of the sweeps (notebook 07 is one trial; notebook 08 records many curves and
replays sweeps from them).

``curves`` trains configurations (``learning_rate``, ``t_max``, ``discount``) for the same
number of environment steps each, ``seeds`` seeds apiece. Configurations that share t_max
(which sets the rollout's shape) run as one compiled program, vmapped over configurations
and seeds (``lab.train.a2c.with_hyper``). The metric at each of ``evaluations`` equally
spaced points is the mean return of the training episodes that ended since the point before
(episodes of the stochastic policy as it learns, as the A3C and GA3C papers report).
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from lab.envs.minatar import GAMES, MinAtarTask
from lab.runs.claims import plural
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.train import checkpoint as checkpoints
from lab.train.a2c import A2CConfig, Hyper, make_train, with_hyper

PRESETS: dict[str, dict[str, Any]] = {"default": {}}
PARAMETERS = ("preset", "game", "sticky", "learning_rate", "t_max", "discount",
              "entropy_cost", "envs", "seeds", "total_steps", "eval_every", "seed")


@dataclasses.dataclass(frozen=True)
class Setup:
    """One configuration's training, validated."""

    game: str
    sticky: float
    config: dict[str, Any]  # learning_rate, t_max, discount
    entropy_cost: float
    envs: int
    seeds: int
    total_steps: int
    eval_every: int
    seed: int

    @property
    def evaluations(self) -> int:
        return self.total_steps // self.eval_every


def configure(**params: Any) -> Setup:
    """The notebook's parameters (``PARAMETERS``) as a ``Setup``; raises ValueError naming a
    bad value, before any work."""
    p = with_preset(params, PRESETS)
    if p["game"] not in GAMES:
        raise ValueError(f"unknown game {p['game']!r}; choose one of {', '.join(GAMES)}")
    for name in ("t_max", "envs", "seeds", "eval_every"):
        if p[name] < 1:
            raise ValueError(f"{name} must be at least 1, got {p[name]}")
    if p["learning_rate"] <= 0:
        raise ValueError(f"learning_rate must be positive, got {p['learning_rate']}")
    if not 0 < p["discount"] <= 1:
        raise ValueError(f"discount must be in (0, 1], got {p['discount']}")
    if p["total_steps"] < p["eval_every"] or p["total_steps"] % p["eval_every"]:
        raise ValueError(f"total_steps ({p['total_steps']}) must be a multiple of eval_every "
                         f"({p['eval_every']}), at least one")
    MinAtarTask(p["game"], p["sticky"])  # the sticky rate
    config = {"learning_rate": float(p["learning_rate"]), "t_max": int(p["t_max"]),
              "discount": float(p["discount"])}
    return Setup(p["game"], float(p["sticky"]), config, float(p["entropy_cost"]), p["envs"],
                 p["seeds"], p["total_steps"], p["eval_every"], p["seed"])


def curves(configs: list[dict[str, Any]], *, game: str = "breakout", sticky: float = 0.1,
           envs: int = 16, steps: int, evaluations: int, seeds: int = 2, seed: int = 0,
           entropy_cost: float = 0.01,
           on_evaluation: Callable[[int, np.ndarray], bool] | None = None,
           progress: Callable[[int, int, float], None] | None = None,
           kept: checkpoints.Kept | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(returns, env_steps)``: ``returns (configs, seeds, evaluations)`` each
    configuration's mean training-episode return in each of ``evaluations`` equal stretches
    of about ``steps`` environment steps (NaN where no episode ended, or after a stop), and
    ``env_steps (configs, evaluations)`` the steps done at each evaluation (whole updates
    of ``envs x t_max`` steps, so they differ a little by t_max).

    ``on_evaluation(e, returns[:, :, e] of the group)`` after each evaluation of a t_max
    group; False stops that group (a pruned trial). ``progress(done, total, seconds)``
    after each group.

    With ``kept`` (a ``lab.train.checkpoint.Kept`` whose folder the caller names by the code
    and versions) each finished group's curves are kept under a key of everything else that
    defines them and read back by a rerun; a group in training saves its state every
    ``SAVE_SECONDS`` beside it and a rerun continues from there: the same initial runs, the
    same compiled chunks in the same order, so the same numbers. A group that
    ``on_evaluation`` stops is not kept."""
    task = MinAtarTask(game, sticky)
    out = np.full((len(configs), seeds, evaluations), np.nan)
    at = np.zeros((len(configs), evaluations))
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(int(c["t_max"]), []).append(i)
    hyper = Hyper(entropy_cost=entropy_cost)
    kept = kept or checkpoints.Kept(None)
    initial = []  # every configuration's initial run: made once, before the first group trains
    start, done = time.perf_counter(), 0
    for t_max, members in sorted(groups.items()):
        config = A2CConfig(envs=envs, t_max=t_max, hyper=hyper)
        updates = max(1, round(steps / evaluations / config.steps_per_update))
        rows = [(i, s) for i in members for s in range(seeds)]
        key = ["a2c", game, sticky, envs, steps, evaluations, seeds, seed, entropy_cost, t_max,
               [configs[i] for i in members]]
        saved = None if kept.folder is None else kept.path(key, "group-").with_suffix(".state")

        def train_group(config=config, updates=updates, rows=rows, members=members,
                        saved=saved):
            if not initial:
                initial.append(_initial_runs(A2CConfig(envs=envs, hyper=hyper), task, configs,
                                             seeds, seed))
            index = np.array([i * seeds + s for i, s in rows])
            state = jax.tree.map(lambda x: x[index], initial[0])
            chunk = _chunk(config, task, updates)
            first, resumed = 0, None if saved is None else checkpoints.resume(saved, state)
            if resumed is not None:
                state, info = resumed
                first = info["done"]
                out[members] = np.array(info["values"], float).reshape(len(members), seeds, -1)
            last = time.perf_counter()
            for e in range(first, evaluations):
                state, m = chunk(state)
                ended = np.asarray(m.episodes)  # (rows, updates)
                total = np.nansum(np.asarray(m.episode_return) * ended, axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = np.where(ended.sum(1) > 0, total / ended.sum(1), np.nan)
                for (i, s), value in zip(rows, mean, strict=True):
                    out[i, s, e] = value
                at[members, e] = (e + 1) * updates * config.steps_per_update
                if on_evaluation is not None and on_evaluation(e, out[members, :, e]) is False:
                    raise _Stopped
                if saved is not None and e + 1 < evaluations and \
                        time.perf_counter() - last >= SAVE_SECONDS:
                    checkpoints.save(saved, state, done=e + 1, values=out[members].tolist())
                    last = time.perf_counter()
            return out[members].tolist()  # float64 -> float -> float64 is exact; NaN kept

        try:
            out[members] = np.array(kept(key, train_group, "group-"), float)
            at[members] = (np.arange(evaluations) + 1) * updates * config.steps_per_update
        except _Stopped:
            pass
        if saved is not None:
            saved.unlink(missing_ok=True)
        done += len(members)
        if progress is not None:
            progress(done, len(configs), time.perf_counter() - start)
    return out, at


SAVE_SECONDS = 60.0  # how often a kept group in training saves its state (``curves``)


class _Stopped(Exception):
    """A group that ``on_evaluation`` stopped: not kept as finished."""


def _initial_runs(config: A2CConfig, task: MinAtarTask, configs: list[dict[str, Any]],
                  seeds: int, seed: int):
    """Every configuration's and seed's initial run, row ``i * seeds + s`` for configuration
    ``i`` and seed ``s``, in one compiled call (an initial run does not depend on ``t_max``,
    so the groups share it). Seed s of every configuration starts from the same network and
    games (common random numbers: configurations differ by their settings only, and a curve
    does not depend on which configurations it was trained beside). All rows are held until
    the last group has started (1.5 MiB each for MinAtar with 16 games)."""
    init, _ = make_train(config, task)
    lr = np.repeat([c["learning_rate"] for c in configs], seeds).astype(np.float32)
    gamma = np.repeat([c["discount"] for c in configs], seeds).astype(np.float32)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(seed), s))(
        np.tile(np.arange(seeds), len(configs)))
    return jax.jit(jax.vmap(lambda k, a, g: with_hyper(init(k), a, g)))(keys, lr, gamma)


def _chunk(config: A2CConfig, task: MinAtarTask, updates: int):
    """One t_max group's jitted chunk of ``updates`` updates, vmapped over its rows."""
    _, run = make_train(config, task)
    return jax.jit(jax.vmap(lambda s: run(s, updates)))


def summary(setup: Setup, final_return: float, steps_done: int) -> dict[str, Any]:
    """The study and headline for ``record`` (a workload: no claim of its own)."""
    c = setup.config
    return claims_summary(
        paper="Mnih et al., Asynchronous Methods for Deep Reinforcement Learning (ICML 2016): "
              "advantage actor-critic, here synchronous and jitted",
        paper_setting="Atari 2600, 16 asynchronous CPU agents",
        measured=(f"MinAtar {setup.game}, {plural(setup.envs, 'game')} in step, "
                  f"{plural(setup.seeds, 'seed')}, {steps_done:,} environment steps; "
                  f"learning rate {c['learning_rate']:.2g}, t_max {c['t_max']}, discount "
                  f"{c['discount']}"),
        claims=[], headline=["a2c_final_return", "env_steps"])
