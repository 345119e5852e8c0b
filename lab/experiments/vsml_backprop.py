"""Learning backprop: a VS-ML network whose cell was taught SGD, against SGD itself.

Kirsch & Schmidhuber 2021 show that the shared sub-LSTM of a VS-ML layer can implement
backpropagation in forward mode. Here the cell is trained pair by pair to imitate online SGD
(:mod:`lab.train.learn_backprop`), then dropped into a one-layer ``VSMLNetwork((inputs,
classes))`` that learns online on digits tasks and on tasks it never saw. Beside it runs the
exact SGD it imitates (:func:`lab.train.learn_backprop.sgd_reference`), from the same
initial weights (the network's ``c[..., 0]``) on the same streams. The claim: the network
learns like SGD, its online accuracy curve on top of SGD's.
"""

from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab.data import DATASETS, TaskSource, load
from lab.models.vsml import VSMLCell, VSMLNetwork, online_loss
from lab.train.learn_backprop import (
    BackpropConfig,
    Imitation,
    batch_imitation,
    make_learn_backprop,
    sgd_reference,
)

TASKS = ("digits", "wine", "iris", "breast_cancer")
IMITATION_PAIRS = 1024  # fresh pair streams the final imitation errors are measured on


@dataclass(frozen=True)
class Setup:
    """One run of the experiment, validated by :func:`configure`."""

    train: BackpropConfig
    classes: int  # classes of a digits task (the other tasks use all their classes)
    test_steps: int  # length of the online streams compared
    test_episodes: int  # streams per task
    tasks: tuple[str, ...]

    @property
    def inputs(self) -> int:
        return self.train.inputs


def configure(*, alpha: float, iterations: int, pairs: int, steps: int, lr: float,
              inputs: int, classes: int, test_steps: int, test_episodes: int,
              tasks: list[str]) -> Setup:
    """The notebook's parameters as a :class:`Setup`; raises ValueError naming a bad one."""
    unknown = [t for t in tasks if t not in DATASETS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)} or a "
                         "cached dataset")
    for name, value in dict(test_steps=test_steps, test_episodes=test_episodes).items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 2 <= classes <= 10:
        raise ValueError(f"classes must be between 2 and 10 (digits has 10), got {classes}")
    config = BackpropConfig(alpha=alpha, iterations=iterations, pairs=pairs, steps=steps, lr=lr,
                            inputs=inputs, classes=classes)
    return Setup(config, classes, test_steps, test_episodes, tuple(tasks))


def learn(setup: Setup, seed: int) -> tuple[VSMLCell, Imitation]:
    """Train a fresh 16-state, 8-channel cell to imitate SGD; returns the cell and the
    training errors (numpy, one per iteration)."""
    k_init, k_train = jax.random.split(jax.random.key(seed))
    cell, errors = make_learn_backprop(setup.train)(VSMLCell(16, 8, key=k_init), k_train)
    return cell, Imitation(*map(np.asarray, errors))


def imitation_errors(setup: Setup, cell: VSMLCell, key: jax.Array) -> dict[str, float]:
    """Relative MSE of each target on fresh random streams of ``test_steps`` steps (longer
    than the training streams when ``test_steps > steps``)."""
    run = eqx.filter_jit(lambda cell, key: batch_imitation(
        cell, key, setup.train, pairs=IMITATION_PAIRS, steps=setup.test_steps)[1])
    return {name: float(v) for name, v in run(cell, key)._asdict().items()}


def task_source(setup: Setup, task: str) -> TaskSource:
    """Digits tasks of ``classes`` random classes; any other task with all its classes;
    every one projected to ``inputs`` features."""
    x, y = load(task, "train")
    classes = setup.classes if task == "digits" else int(y.max()) + 1
    return TaskSource(x, y, inputs=setup.inputs, classes=classes, steps=setup.test_steps)


def initial_weights(net: VSMLNetwork, key: jax.Array) -> jax.Array:
    """The weights a one-layer network starts an episode with: ``c[..., 0]`` of the state
    it draws from ``key`` (the same key its ``__call__`` gets). (inputs, classes)."""
    return net.init_state(key).layers[0][1][..., 0]


def reference_logits(net: VSMLNetwork, xs: jax.Array, ys: jax.Array, key: jax.Array,
                     alpha) -> jax.Array:
    """:func:`sgd_reference` from the weights ``net`` starts with when given ``key``: a
    learner ``(xs, ys, key) -> logits`` to run beside the network."""
    return sgd_reference(xs, ys, initial_weights(net, key), alpha)


@eqx.filter_jit
def sample_streams(source: TaskSource, key: jax.Array, episodes: int):
    """``episodes`` streams ``(xs (episodes, T, inputs), ys (episodes, T))`` and one key per
    stream for the learner's initial state. (``lax.map``, not ``vmap``: the sampler compiles
    several times faster unbatched, and compilation dominates here.)"""
    k_tasks, k_runs = jax.random.split(key)
    xs, ys = jax.lax.map(source.sample, jax.random.split(k_tasks, episodes))
    return xs, ys, jax.random.split(k_runs, episodes)


@eqx.filter_jit
def online_accuracies(runs: dict, xs: jax.Array, ys: jax.Array, keys: jax.Array) -> dict:
    """Accuracy at each step averaged over the streams, ``{name: (T,)}``, for learners
    ``run(xs, ys, key) -> logits`` that all see the same streams and keys. Learners are
    traced, so tasks with the same number of classes share one compilation."""

    def episode(xs, ys, key):
        return {name: online_loss(run(xs, ys, key), ys)[1] for name, run in runs.items()}

    return jax.tree.map(lambda c: c.mean(0), jax.vmap(episode)(xs, ys, keys))


def _task_streams(setup: Setup, key: jax.Array):
    """Per task: its name, a network of its sizes (any cell) and the streams and keys that
    every learner gets. Networks of the same sizes draw the same initial state from the
    same key, whatever their cell."""
    for t, task in enumerate(setup.tasks):
        source = task_source(setup, task)
        shell = VSMLNetwork((setup.inputs, source.classes), ticks=setup.train.ticks,
                            key=jax.random.key(0))
        yield task, shell, sample_streams(source, jax.random.fold_in(key, t),
                                          setup.test_episodes)


def compare(setup: Setup, cells: dict[str, VSMLCell], key: jax.Array
            ) -> dict[str, dict[str, np.ndarray]]:
    """Online accuracy at each step, averaged over ``test_episodes`` streams: ``curves[task]
    [name]`` (test_steps,), for a network around each of ``cells`` and for ``"sgd"``
    (:func:`sgd_reference` at ``alpha``, from the networks' initial weights). Every learner
    sees the same streams and starts from the same ``c[..., 0]``."""
    curves = {}
    for task, shell, streams in _task_streams(setup, key):
        runs = {name: eqx.tree_at(lambda n: n.cell, shell, cell) for name, cell in cells.items()}
        alpha = jnp.asarray(setup.train.alpha)
        runs["sgd"] = eqx.Partial(reference_logits, shell, alpha=alpha)
        curves[task] = {name: np.asarray(c, np.float64)
                        for name, c in online_accuracies(runs, *streams).items()}
    return curves


def sgd_sweep(setup: Setup, alphas: list[float], key: jax.Array) -> dict[str, dict[float, float]]:
    """Mean online accuracy of :func:`sgd_reference` at each step size, on the streams
    :func:`compare` uses for the same ``key``: ``{task: {alpha: accuracy}}``. What the
    choice of ``alpha`` rests on."""
    sweep = {}
    for task, shell, streams in _task_streams(setup, key):
        runs = [eqx.Partial(reference_logits, shell, alpha=jnp.asarray(a)) for a in alphas]
        curves = online_accuracies(dict(enumerate(runs)), *streams)
        sweep[task] = {float(a): float(np.mean(curves[i])) for i, a in enumerate(alphas)}
    return sweep


def summarise(curves: dict[str, dict[str, np.ndarray]], imitation: dict[str, float],
              setup: Setup, name: str = "vsml") -> dict[str, Any]:
    """The headline numbers: per task the mean online accuracy of network ``name`` and of
    SGD over the stream and their gap (VS-ML minus SGD), chance; the largest gap in
    magnitude; the final imitation errors."""
    out: dict[str, Any] = {f"imitation_{k}": v for k, v in imitation.items()}
    gaps = []
    for task, by_learner in curves.items():
        vsml, sgd = float(np.mean(by_learner[name])), float(np.mean(by_learner["sgd"]))
        out[f"{task}_vsml_accuracy"], out[f"{task}_sgd_accuracy"] = vsml, sgd
        out[f"{task}_gap"] = vsml - sgd
        out[f"{task}_chance"] = 1 / task_source(setup, task).classes
        gaps.append(vsml - sgd)
    out["largest_gap"] = float(max(gaps, key=abs))
    out["mean_gap"] = float(np.mean(gaps))
    return out


def describe(metrics: dict[str, Any], setup: Setup) -> str:
    """The conclusions, as Markdown, from :func:`summarise`'s numbers."""
    m = metrics
    rows = "\n".join(f"| {t} | {m[f'{t}_chance']:.2f} | {m[f'{t}_vsml_accuracy']:.3f} | "
                     f"{m[f'{t}_sgd_accuracy']:.3f} | {m[f'{t}_gap']:+.3f} |"
                     for t in setup.tasks)
    return f"""
Imitation of SGD on fresh random streams of {setup.test_steps} steps (relative MSE; the cell
trained on streams of {setup.train.steps}): forward message {m['imitation_fwd']:.3f}, backward
message {m['imitation_bwd']:.3f}, weight {m['imitation_w']:.3f}.

Mean online accuracy over the first {setup.test_steps} examples of {setup.test_episodes}
streams per task, the same streams and initial weights for both (SGD step alpha =
{setup.train.alpha} on z = x W / {setup.inputs}):

| task | chance | VS-ML (learned SGD) | SGD | gap |
|---|---|---|---|---|
{rows}

The largest gap is {m['largest_gap']:+.3f}, the mean gap {m['mean_gap']:+.3f}.
"""
