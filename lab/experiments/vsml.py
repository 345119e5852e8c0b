"""The VS-ML reproduction: meta-train on digits, meta-test on tasks never seen.

Claims (Kirsch & Schmidhuber 2021), measured over several meta-training seeds:
(1) meta-trained on digits, VS-ML learns online on each unseen task well above chance
    (here: mean online accuracy at least chance + 0.1);
(2) early in the stream (the first ``test_steps`` examples) it beats online SGD and Adam
    whose step sizes were tuned on the meta-training tasks;
(3) it generalises to the unseen tasks better than a Meta-RNN meta-trained the same way.
"""

from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab.data import DATASETS, TaskSource, load
from lab.models.meta_rnn import MetaRNN
from lab.models.vsml import VSMLNetwork, online_loss
from lab.train.online import make_online_learner
from lab.train.vsml import MetaConfig, make_meta_train

UNSEEN = ("wine", "breast_cancer", "iris", "sum_sign", "random_labels")
BASELINES = {"sgd_linear": ("sgd", 0), "sgd_hidden": ("sgd", 32),
             "adam_linear": ("adam", 0), "adam_hidden": ("adam", 32)}
BASELINE_LRS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
ABOVE_CHANCE = 0.1


@dataclass(frozen=True)
class Setup:
    """One reproduction run, validated by :func:`configure`."""

    meta: MetaConfig
    inputs: int
    classes: int
    steps: int
    test_steps: int
    test_episodes: int
    seeds: int
    tasks: tuple[str, ...]


def configure(*, method: str, iterations: int, tasks_per_batch: int, lr: float,
              population: int, inputs: int, classes: int, steps: int, test_steps: int,
              test_episodes: int, seeds: int, tasks: list[str]) -> Setup:
    """The notebook's parameters as a :class:`Setup`; raises ValueError naming a bad one."""
    unknown = [t for t in tasks if t not in DATASETS]
    if unknown:
        raise ValueError(f"unknown meta-test task(s) {unknown}; choose from {', '.join(UNSEEN)}"
                         " or a cached dataset")
    for name, value in dict(steps=steps, test_steps=test_steps, test_episodes=test_episodes,
                            seeds=seeds, inputs=inputs).items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 2 <= classes <= 10:
        raise ValueError(f"classes must be between 2 and 10 (digits has 10), got {classes}")
    meta = MetaConfig(method=method, iterations=iterations, tasks=tasks_per_batch, lr=lr,
                      population=population)
    return Setup(meta, inputs, classes, steps, test_steps, test_episodes, seeds, tuple(tasks))


def digits_source(setup: Setup, steps: int) -> TaskSource:
    x, y = load("digits", "train")
    return TaskSource(x, y, inputs=setup.inputs, classes=setup.classes, steps=steps)


def test_source(setup: Setup, task: str) -> TaskSource:
    """All classes of an unseen dataset, projected to the same input size."""
    x, y = load(task, "train")
    return TaskSource(x, y, inputs=setup.inputs, classes=int(y.max()) + 1,
                      steps=setup.test_steps)


def meta_train(setup: Setup, learner: str, seed: int):
    """Meta-train a 'vsml' or 'meta_rnn' learner on digits tasks; returns (learner, losses,
    accuracies) with one value per meta-iteration."""
    init_key, train_key = jax.random.split(jax.random.key(seed))
    if learner == "vsml":
        model = VSMLNetwork((setup.inputs, setup.classes), key=init_key)
    else:
        model = MetaRNN(setup.inputs, setup.classes, key=init_key)
    model, (losses, accuracies) = make_meta_train(setup.meta, digits_source(setup, setup.steps))(
        model, train_key)
    return model, np.asarray(losses), np.asarray(accuracies)


def for_classes(model, classes: int):
    """The meta-trained learner for a task with ``classes`` classes: a VS-ML network of
    that output size around the same shared cell; the Meta-RNN's first ``classes`` logits."""
    if isinstance(model, VSMLNetwork):
        fresh = VSMLNetwork((model.sizes[0], classes), ticks=model.ticks,
                            feed_label=model.feed_label, key=jax.random.key(0))
        return eqx.tree_at(lambda n: n.cell, fresh, model.cell)
    return eqx.Partial(_first_logits, model, classes=classes)


def _first_logits(model, xs, ys, key, *, classes):
    return model(xs, ys, key)[:, :classes]


@eqx.filter_jit
def online_accuracy(run, source: TaskSource, key: jax.Array, episodes: int, *args) -> jax.Array:
    """Accuracy at each step of the stream, averaged over ``episodes`` fresh tasks: (T,).
    ``run(xs, ys, key, *args) -> logits``; a meta-trained learner (an Equinox module) is
    traced, so seeds of the same learner share one compilation."""

    def episode(key):
        k_task, k_run = jax.random.split(key)
        xs, ys = source.sample(k_task)
        return online_loss(run(xs, ys, k_run, *args), ys)[1].astype(jnp.float32)

    return jax.vmap(episode)(jax.random.split(key, episodes)).mean(0)


def tune_baselines(setup: Setup) -> dict[str, float]:
    """Each baseline's step size: the lowest mean online loss on digits tasks of
    ``test_steps`` examples (the meta-training distribution)."""
    source = digits_source(setup, setup.test_steps)
    tuned = {}
    for name, (optimizer, hidden) in BASELINES.items():
        learner = make_online_learner(setup.inputs, setup.classes, hidden, optimizer)

        @eqx.filter_jit
        def losses(source, key, learner=learner):
            def one(lr, key):
                k_task, k_init = jax.random.split(key)
                xs, ys = source.sample(k_task)
                return online_loss(learner(xs, ys, k_init, lr), ys)[0]

            keys = jax.random.split(key, setup.test_episodes)
            return jax.vmap(lambda lr: jax.vmap(lambda k: one(lr, k))(keys).mean())(
                jnp.asarray(BASELINE_LRS))

        values = np.nan_to_num(np.asarray(losses(source, jax.random.key(7))), nan=np.inf)
        tuned[name] = BASELINE_LRS[int(np.argmin(values))]
    return tuned


def verdict(curves: dict[str, dict[str, np.ndarray]], chances: dict[str, float]) -> dict[str, Any]:
    """The three claims' numbers. ``curves[task][learner]``: accuracy per step, (seeds, T)
    for the meta-learners and (T,) for the baselines."""
    out: dict[str, Any] = {}
    above, beats_baselines, beats_rnn = [], [], []
    for task, by_learner in curves.items():
        score = {name: float(np.mean(c)) for name, c in by_learner.items()}
        best_baseline = max(score[b] for b in BASELINES)
        for name, value in score.items():
            out[f"{task}_{name}_accuracy"] = value
        out[f"{task}_chance"] = chances[task]
        above.append(score["vsml"] >= chances[task] + ABOVE_CHANCE)
        beats_baselines.append(score["vsml"] > best_baseline)
        beats_rnn.append(score["vsml"] > score["meta_rnn"])
    tasks = list(curves)
    out["tasks_vsml_above_chance"] = [t for t, ok in zip(tasks, above, strict=True) if ok]
    out["tasks_vsml_beats_baselines"] = [t for t, ok in zip(tasks, beats_baselines, strict=True)
                                         if ok]
    out["tasks_vsml_beats_meta_rnn"] = [t for t, ok in zip(tasks, beats_rnn, strict=True) if ok]
    out["mean_vsml_accuracy"] = float(np.mean([out[f"{t}_vsml_accuracy"] for t in tasks]))
    out["mean_meta_rnn_accuracy"] = float(np.mean([out[f"{t}_meta_rnn_accuracy"] for t in tasks]))
    out["claim_above_chance_on_every_task"] = all(above)
    out["claim_beats_sgd_and_adam_early"] = all(beats_baselines)
    out["claim_generalises_better_than_meta_rnn"] = (
        out["mean_vsml_accuracy"] > out["mean_meta_rnn_accuracy"])
    return out


def describe(metrics: dict[str, Any], setup: Setup) -> str:
    """The conclusions, as Markdown, from :func:`verdict`'s numbers."""
    m = metrics
    holds = {True: "holds", False: "does not hold"}
    rows = "\n".join(
        f"| {t} | {m[f'{t}_chance']:.2f} | {m[f'{t}_vsml_accuracy']:.3f} | "
        f"{m[f'{t}_meta_rnn_accuracy']:.3f} | "
        f"{max(m[f'{t}_{b}_accuracy'] for b in BASELINES):.3f} |" for t in setup.tasks)
    return f"""
Mean online accuracy over the first {setup.test_steps} examples of {setup.test_episodes}
episodes per task ({setup.seeds} meta-training seeds for VS-ML and the Meta-RNN):

| task | chance | VS-ML | Meta-RNN | best of SGD/Adam |
|---|---|---|---|---|
{rows}

**(1) Above chance on every unseen task: {holds[m['claim_above_chance_on_every_task']]}.**
VS-ML is at least chance + {ABOVE_CHANCE} on {m['tasks_vsml_above_chance']}.

**(2) Beats online SGD and Adam early in the stream:
{holds[m['claim_beats_sgd_and_adam_early']]}.** VS-ML is ahead of the best tuned baseline on
{m['tasks_vsml_beats_baselines']}.

**(3) Generalises better than the Meta-RNN:
{holds[m['claim_generalises_better_than_meta_rnn']]}.** Mean over the unseen tasks: VS-ML
{m['mean_vsml_accuracy']:.3f}, Meta-RNN {m['mean_meta_rnn_accuracy']:.3f}; VS-ML is ahead on
{m['tasks_vsml_beats_meta_rnn']}. Check that both meta-trained before reading this: the
final meta-training loss on digits (chance ln {setup.classes} = {np.log(setup.classes):.3f}) was
{_rounded(m.get('vsml_meta_loss_end', []))} for VS-ML and
{_rounded(m.get('meta_rnn_meta_loss_end', []))} for the Meta-RNN (one per seed).
"""


def _rounded(values) -> list[float]:
    return [round(float(v), 3) for v in values]
