"""VS-ML against tuned online SGD and Adam as meta-training compute grows (issue 18, item 3).

VS-ML (one VS-ML layer, ``inputs`` -> ``classes``) is meta-trained on tasks of one dataset's
train split, with meta-gradients or ES, and checkpointed at several budgets (meta-iterations,
e.g. B, 4B, 16B) along ONE run: a budget is a point of the run, and a later call with more
or larger budgets resumes from the last state saved. At each budget its online accuracy on
held-out tasks (the dataset's test split; ``test_steps`` examples per episode) is set against
online SGD and Adam (linear and one hidden layer of 32) whose step sizes are tuned on tasks of
the train split, as :func:`lab.experiments.vsml.tune_baselines` tunes them on digits. The gap
is VS-ML minus the best tuned baseline, per meta-training seed, on the same episodes.

Seeds are meta-trained together: one program vmaps :func:`lab.train.vsml.meta_iterations` (the
meta-iterations of :func:`lab.train.vsml.make_meta_train`, so seed ``s`` follows the same
trajectory as ``lab.experiments.vsml.meta_train`` for seed ``s``) over the seeds.

Compute is counted two ways: wall seconds of the meta-training chunks (all seeds together,
compilation timed apart) and FLOPs. The FLOPs are XLA's cost analysis of the compiled
meta-iteration of one seed, times the meta-iterations. XLA counts a loop's body once,
whatever its trip count, so the program analysed is the meta-iteration with every
``lax.scan`` unrolled (:func:`unrolled`); since that is affine in the episode length, it is
analysed at 1 and 2 steps and extrapolated (:func:`meta_iteration_flops`).
"""

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

from lab.data import TaskSource, load
from lab.experiments.vsml import BASELINES, online_accuracy, pooled, tune_step_sizes
from lab.models.vsml import VSMLNetwork
from lab.train import checkpoint
from lab.train.online import make_online_learner
from lab.train.vsml import MetaConfig, meta_iterations, meta_optimizer

DATASETS = ("digits", "mnist_5k")
TUNE_KEY, TEST_KEY = 7, 11  # the tuning episodes (as tune_baselines) and the held-out ones


@dataclass(frozen=True)
class Study:
    """One dataset and method, meta-trained to several budgets."""

    dataset: str = "digits"
    """'digits' (8x8) or 'mnist_5k' (28x28, pooled 4x4 to 7x7 as ``unseen_source`` does)."""
    method: str = "gradient"
    """'gradient' or 'es'."""
    budgets: tuple[int, ...] = (375, 1500, 6000)
    """Meta-iterations at which VS-ML is checkpointed and meta-tested, increasing."""
    seeds: int = 3
    """Meta-training seeds, trained together."""
    lr: float = 3e-3
    """Adam step size on theta (the notebook: 3e-3 for gradient; 0.025 for ES)."""
    tasks: int = 8
    """Episodes per meta-iteration."""
    population: int = 256
    """ES population (antithetic pairs, so even)."""
    inputs: int = 16
    """Every task is projected to this many features."""
    classes: int = 3
    """Classes per task."""
    steps: int = 60
    """Meta-training episode length."""
    test_steps: int = 100
    """Meta-test (and tuning) episode length."""
    test_episodes: int = 256
    """Held-out episodes per accuracy (and tuning episodes per step size)."""
    every: int = 0
    """Meta-iterations per chunk (and checkpoint); 0: the gcd of the budgets."""

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of "
                             f"{', '.join(DATASETS)}")
        budgets = tuple(int(b) for b in self.budgets)
        if not budgets or min(budgets) < 1 or list(budgets) != sorted(set(budgets)):
            raise ValueError(f"budgets must be increasing positive iteration counts, got "
                             f"{list(self.budgets)}")
        object.__setattr__(self, "budgets", budgets)
        for name in ("seeds", "test_episodes", "test_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.every < 0:
            raise ValueError(f"every must be 0 (the budgets' gcd) or positive, got {self.every}")
        self.meta  # noqa: B018 (MetaConfig validates method, lr, tasks, population)

    @property
    def meta(self) -> MetaConfig:
        return MetaConfig(method=self.method, iterations=self.budgets[-1], tasks=self.tasks,
                          lr=self.lr, population=self.population)

    @property
    def chunk(self) -> int:
        return self.every or math.gcd(*self.budgets)

    def run_config(self) -> dict[str, Any]:
        """What determines the meta-training trajectory (not the budgets: a run with more
        or larger budgets continues the same trajectory)."""
        meta = asdict(self.meta)
        del meta["iterations"]
        return {**meta, "dataset": self.dataset, "seeds": self.seeds, "inputs": self.inputs,
                "classes": self.classes, "steps": self.steps}


class Sources(NamedTuple):
    train: TaskSource  # meta-training: train split, ``steps`` per episode
    tune: TaskSource  # tuning the baselines: train split, ``test_steps``
    test: TaskSource  # held-out tasks: test split, ``test_steps``


def sources(study: Study) -> Sources:
    def source(split, steps):
        x, y = load(study.dataset, split)
        return TaskSource(pooled(x), y, inputs=study.inputs, classes=study.classes, steps=steps)

    return Sources(source("train", study.steps), source("train", study.test_steps),
                   source("test", study.test_steps))


# --- FLOPs -------------------------------------------------------------------------------


def unrolled(closed: jcore.ClosedJaxpr):
    """A function evaluating ``closed`` with every ``scan`` in it (nested ones, and those
    inside jitted calls, too) fully unrolled: the program XLA's cost analysis counts in
    full, since it counts a loop's body once."""

    def run(*args):
        return _evaluate(closed.jaxpr, closed.consts, args)

    return run


def _unroll_closed(closed: jcore.ClosedJaxpr) -> jcore.ClosedJaxpr:
    shapes = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    return jax.make_jaxpr(unrolled(closed))(*shapes)


def _evaluate(jaxpr: jcore.Jaxpr, consts, args):
    env = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        params = {k: _unroll_closed(v) if isinstance(v, jcore.ClosedJaxpr) else v
                  for k, v in eqn.params.items()}
        if eqn.primitive.name == "scan":
            params["unroll"] = max(params["length"], 1)
        params = eqn.primitive.get_bind_params(params)
        subfuns, params = ((), params) if isinstance(params, dict) else params  # older jax
        out = eqn.primitive.bind(*subfuns, *map(read, eqn.invars), **params)
        env.update(zip(eqn.outvars, out if eqn.primitive.multiple_results else [out],
                       strict=True))
    return [read(v) for v in jaxpr.outvars]


def xla_flops(fn, *args) -> float:
    """XLA's cost-analysis FLOPs of ``fn(*args)`` compiled, with its scans unrolled."""
    closed = jax.make_jaxpr(fn)(*args)
    flat = jax.tree.leaves(args)
    cost = jax.jit(unrolled(closed)).lower(*flat).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"])


def _one_iteration_flops(config: MetaConfig, source: TaskSource, learner) -> float:
    opt_state = meta_optimizer(config).init(eqx.filter(learner, eqx.is_array))
    params, static = eqx.partition(learner, eqx.is_array)

    def iteration(params, opt_state, source, key):
        return meta_iterations(config, source, eqx.combine(params, static), opt_state, key,
                           jnp.asarray(0), 1, None)

    return xla_flops(iteration, params, opt_state, source, jax.random.key(0))


def meta_iteration_flops(config: MetaConfig, source: TaskSource, learner) -> float:
    """FLOPs of one meta-iteration of one learner on ``source``'s episodes: XLA's cost
    analysis with the scans unrolled, at episodes of 1 and 2 steps, extrapolated to
    ``source.steps`` (every step of the rolled loop repeats the same work). Not the
    unrolled program at full length: XLA's count of it grows faster than linearly (for
    meta-gradients at the default sizes, the increment per step rises from 7.1M FLOPs at
    step 2 to 9.1M at step 8), which is bookkeeping of the unrolled copies, not work the
    loop does; ES (forward only) is affine to 1e-5 at 5 steps."""
    at = [_one_iteration_flops(replace(config, iterations=1), _with_steps(source, t), learner)
          for t in (1, 2)]
    return at[0] + (source.steps - 1) * (at[1] - at[0])


def _with_steps(source: TaskSource, steps: int) -> TaskSource:
    """``source`` with episodes of ``steps`` (re-standardising standardised data: the same)."""
    out = TaskSource(np.asarray(source.x), np.asarray(source.y), inputs=source.inputs,
                     classes=source.classes, steps=steps)
    return eqx.tree_at(lambda s: (s.x, s.y), out, (source.x, source.y))


# --- meta-training to the budgets --------------------------------------------------------


def initial(study: Study):
    """The seeds' fresh learners, optimizer states and meta-training keys, stacked; seed
    ``s`` as ``lab.experiments.vsml.meta_train`` starts it."""
    learners, keys = [], []
    for seed in range(study.seeds):
        init_key, train_key = jax.random.split(jax.random.key(seed))
        learners.append(VSMLNetwork((study.inputs, study.classes), key=init_key))
        keys.append(train_key)
    learners = jax.tree.map(lambda *x: jnp.stack(x), *learners)
    opt_states = jax.vmap(meta_optimizer(study.meta).init)(eqx.filter(learners, eqx.is_array))
    return learners, opt_states, jnp.stack(keys)


def _chunk(config: MetaConfig, count: int, source, learners, opt_states, keys, first):
    def one(learner, opt_state, key):
        return meta_iterations(config, source, learner, opt_state, key, first, count, None)

    return jax.vmap(one)(learners, opt_states, keys)


class Budget(NamedTuple):
    budget: int
    learners: Any  # the seeds' VS-ML networks, stacked
    losses: np.ndarray  # (seeds, budget) meta-training loss per iteration
    seconds: float  # wall seconds of meta-training up to here, all seeds, no compilation
    compile_seconds: float  # compilation in the process that trained the last chunk


def run_dir(study: Study, root: str | Path) -> Path:
    digest = hashlib.sha1(json.dumps(study.run_config(), sort_keys=True).encode()).hexdigest()
    return Path(root) / f"{study.dataset}-{study.method}-{digest[:10]}"


def train_to_budgets(study: Study, source: TaskSource, directory: str | Path, log=print):
    """Meta-train the seeds to every budget, resuming from ``directory``; yields a
    :class:`Budget` as each is reached.

    ``directory/state.eqx`` holds the latest (learners, optimizer states, losses), saved
    after every chunk; ``directory/budget{B}.eqx`` the learners and losses at budget ``B``.
    A budget already saved is read, not retrained; the run goes on from the state. Iteration
    ``i`` draws its tasks from ``fold_in(key, i)``, so an interrupted and resumed run gives
    the uninterrupted one's result."""
    directory = Path(directory)
    config = replace(study.meta, iterations=1)  # as make_meta_train: one compilation
    learners, opt_states, keys = initial(study)
    header = {"config": study.run_config(), "learner": checkpoint.fingerprint(learners),
              "keys": np.asarray(jax.random.key_data(keys)).tolist()}
    done, seconds, losses = 0, 0.0, np.zeros((study.seeds, 0), np.float32)
    state_path = directory / "state.eqx"
    if state_path.exists():
        info = checkpoint.read_info(state_path)
        like = (learners, opt_states, np.zeros((study.seeds, info["done"]), np.float32))
        (learners, opt_states, losses), info = checkpoint.resume(state_path, like, **header)
        done, seconds, losses = info["done"], info["seconds"], np.asarray(losses)
        log(f"resumed {state_path} at iteration {done}")
    compiled, compile_seconds = {}, 0.0
    for budget in study.budgets:
        path = directory / f"budget{budget}.eqx"
        if path.exists() and budget <= done:
            like = (learners, np.zeros((study.seeds, budget), np.float32))
            (saved, saved_losses), info = checkpoint.resume(path, like, **header)
            yield Budget(budget, saved, np.asarray(saved_losses), info["seconds"],
                         info["compile_seconds"])
            continue
        if budget < done:
            raise ValueError(f"{state_path} is past budget {budget} (at {done}) but "
                             f"{path} is missing; choose budgets it saved or a new folder")
        while done < budget:
            count = min(study.chunk, budget - done)
            args = (source, learners, opt_states, keys, jnp.asarray(done))
            if count not in compiled:
                start = time.perf_counter()
                compiled[count] = jax.jit(_chunk, static_argnums=(0, 1)).lower(
                    config, count, *args).compile()
                compile_seconds += time.perf_counter() - start
            start = time.perf_counter()
            learners, opt_states, (chunk_losses, _) = jax.block_until_ready(
                compiled[count](*args))
            seconds += time.perf_counter() - start
            losses = np.concatenate([losses, np.asarray(chunk_losses)], 1)
            done += count
            checkpoint.save(state_path, (learners, opt_states, losses), done=done,
                            seconds=seconds, **header)
        checkpoint.save(path, (learners, losses), done=done, seconds=seconds,
                        compile_seconds=compile_seconds, **header)
        log(f"budget {budget}: {seconds:.1f} s meta-training, loss "
            f"{losses[:, -50:].mean(1).round(3).tolist()} (last 50, per seed)")
        yield Budget(budget, learners, losses.copy(), seconds, compile_seconds)


# --- meta-testing and the gap ------------------------------------------------------------


def tune(source: TaskSource, episodes: int) -> dict[str, float]:
    """Each baseline's step size: the lowest mean online loss on ``episodes`` tasks of
    ``source`` (:func:`lab.experiments.vsml.tune_step_sizes`)."""
    return tune_step_sizes(source, episodes, jax.random.key(TUNE_KEY))


def baseline_accuracy(source: TaskSource, lrs: dict[str, float], episodes: int) -> dict[str, float]:
    """Each tuned baseline's mean online accuracy on ``episodes`` tasks of ``source``."""
    return {name: float(online_accuracy(make_online_learner(source.inputs, source.classes,
                                                            hidden, optimizer),
                                        source, jax.random.key(TEST_KEY), episodes,
                                        lrs[name]).mean())
            for name, (optimizer, hidden) in BASELINES.items()}


def vsml_accuracy(learners, source: TaskSource, episodes: int) -> list[float]:
    """Each seed's mean online accuracy on the same ``episodes`` tasks as the baselines."""
    seeds = jax.tree.leaves(learners)[0].shape[0]
    return [float(online_accuracy(jax.tree.map(lambda x, s=s: x[s], learners), source,
                                  jax.random.key(TEST_KEY), episodes).mean())
            for s in range(seeds)]


def gap(vsml: list[float], baselines: dict[str, float]) -> dict[str, Any]:
    """VS-ML minus the best baseline, per seed, and what that says: 'ahead' (every seed
    above the best baseline), 'behind' (every seed below) or 'mixed'."""
    best = max(baselines, key=baselines.get)
    gaps = [v - baselines[best] for v in vsml]
    verdict = "ahead" if min(gaps) > 0 else "behind" if max(gaps) < 0 else "mixed"
    return {"best_baseline": best, "best_baseline_accuracy": baselines[best],
            "vsml_accuracy": list(vsml), "gap": gaps, "gap_mean": float(np.mean(gaps)),
            "gap_std": float(np.std(gaps)), "verdict": verdict}


def run(study: Study, root: str | Path, *, log=print):
    """The study, one budget at a time: count the FLOPs of a meta-iteration, tune the
    baselines, then meta-train to each budget (resuming from ``root``) and measure the gap
    there. Yields the JSON-ready result after each budget, with every budget so far."""
    data = sources(study)
    directory = run_dir(study, root)
    flops = meta_iteration_flops(study.meta, data.train, VSMLNetwork(
        (study.inputs, study.classes), key=jax.random.key(0)))
    log(f"{study.dataset} {study.method}: {flops:.4g} FLOPs per meta-iteration and seed")
    lrs = tune(data.tune, study.test_episodes)
    baselines = baseline_accuracy(data.test, lrs, study.test_episodes)
    log(f"tuned step sizes {lrs}; held-out accuracy {baselines}")
    result = {"study": asdict(study), "run_dir": str(directory), "flops_per_iteration": flops,
              "tuned_lrs": lrs, "baselines": baselines, "backend": jax.default_backend(),
              "device": jax.devices()[0].device_kind, "budgets": []}
    for b in train_to_budgets(study, data.train, directory, log=log):
        result["budgets"].append({
            "budget": b.budget, "flops": b.budget * flops, "seconds": b.seconds,
            "compile_seconds": b.compile_seconds,
            "meta_loss_last50": b.losses[:, -50:].mean(1).tolist(),
            **gap(vsml_accuracy(b.learners, data.test, study.test_episodes), baselines)})
        yield result
