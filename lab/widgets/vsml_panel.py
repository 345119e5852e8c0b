"""The VS-ML panel: meta-train VS-ML or the Meta-RNN live, watch its online accuracy on a
chosen task, and look at the sub-LSTM states of the first VS-ML layer.

    panel = vsml_panel(params, trained)   # the notebook's parameters and meta-trained learners
    panel.show()

Training meta-trains one learner for one seed with the controls' values and the notebook's
other parameters, in chunks of about a second on 2 CPU cores at the notebook's defaults
(``lab.experiments.vsml.meta_train``'s callback). Panel runs keep no checkpoints, so they
never resume from, or overwrite, the notebook's. After each chunk the figure shows the
meta-training online loss (and accuracy) per iteration beside the notebook's runs of that
learner, and the online accuracy at each step of the stream on the chosen task for the
current theta. The viewer below takes one episode of that task and shows, at the step
picked with a slider, the first layer's sub-LSTM states over the grid of its weights
(input a, output b) and, for a one-layer network, the effective weight W_t.
"""

from typing import Any, NamedTuple

import ipywidgets as widgets
import jax
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import vsml as experiment
from lab.models.vsml import VSMLNetwork
from lab.runs.params import with_preset
from lab.train.vsml import METHODS
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel, figure_png

CONTROLS = (
    Control("learner", str, options=experiment.LEARNERS),
    Control("method", str, options=METHODS),
    Control("iterations", int, 1),
    Control("tasks_per_batch", int, 1, 512, description="tasks_per_batch (of this learner)"),
    Control("lr", float, 1e-5, 1.0, log=True, description="lr (of this learner)"),
    Control("steps", int, 1, 500, description="steps (meta-training episode)"),
    Control("classes", int, 2, 10),
)
EPISODE_STEPS_PER_REPORT = 9600
"""Meta-training work between two reports, in episode steps: at the notebook's defaults 20
iterations of 8 VS-ML episodes of 60 steps, about a second on 2 CPU cores."""
WATCH_KEY = 4000  # the meta-test episodes watched during a run: the same after every chunk
STATES_SHOWN = 2  # channels of c and of h in the viewer: those that vary most in the episode


class Run(NamedTuple):
    """A meta-trained learner and what the panel watched it on (``panel.result``)."""

    setup: experiment.Setup
    learner: str
    task: str
    seed: int
    trained: experiment.Trained


def chunk(setup: experiment.Setup, learner: str) -> int:
    """Meta-iterations between two reports: about ``EPISODE_STEPS_PER_REPORT`` episode steps
    (an ES iteration runs ``population`` times the episodes)."""
    config = setup.learner_config(learner)
    episodes = config.tasks * (config.population if config.method == "es" else 1)
    return max(1, min(config.iterations, round(EPISODE_STEPS_PER_REPORT
                                               / (episodes * setup.steps))))


def watched_source(setup: experiment.Setup, task: str):
    """Meta-test episodes of ``task``: a meta-test task (the meta-training dataset's held-out
    split when it is one), or else the meta-training dataset (``digits`` by default, the
    meta-training distribution) at the meta-test length."""
    if task not in setup.tasks and task == setup.meta_dataset:
        return experiment.meta_source(setup, setup.test_steps)
    return experiment.unseen_source(setup, task)


def watchable(setup: experiment.Setup) -> tuple[str, ...]:
    """The tasks the panel can watch: the meta-test tasks and the meta-training dataset."""
    return tuple(dict.fromkeys((*setup.tasks, setup.meta_dataset)))


def stream_accuracy(model, source, episodes: int) -> np.ndarray:
    """Online accuracy at each step of the stream, over ``episodes`` fixed episodes (the
    model is traced: one compilation serves every chunk of a run)."""
    run = experiment.for_classes(model, source.classes)
    return experiment.online_accuracy(run, source, jax.random.key(WATCH_KEY), episodes)


def draw(figure: Figure, data: dict[str, Any]) -> None:
    """Meta-training loss (and accuracy) per iteration; online accuracy over the stream."""
    loss_ax, stream_ax = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for i, losses in enumerate(data["earlier"]):
        loss_ax.plot(np.arange(1, len(losses) + 1), losses, color="gray", alpha=0.4,
                     linewidth=0.8,
                     label=f"notebook's {data['learner']} (a line per seed)" if i == 0 else None)
    x = np.arange(1, len(data["losses"]) + 1)
    loss_ax.plot(x, data["losses"], color="C3", label=data["label"])
    loss_ax.axhline(np.log(data["classes"]), color="k", linestyle=":", label="chance")
    loss_ax.set(xlim=(0, data["iterations"]), xlabel="meta-iteration",
                ylabel=f"online cross-entropy ({data.get('meta_dataset', 'digits')})",
                title="Meta-training")
    accuracies = data["accuracies"]
    if accuracies is not None and np.isfinite(accuracies).any():  # not measured by ES
        twin = loss_ax.twinx()
        twin.plot(x, accuracies, color="C0", alpha=0.5, linewidth=0.8)
        twin.set_ylabel("online accuracy", color="C0")
    loss_ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    step = np.arange(1, len(data["accuracy"]) + 1)
    stream_ax.plot(step, data["accuracy"], color="C3", label=data["label"])
    stream_ax.axhline(data["chance"], color="k", linestyle=":", label="chance")
    stream_ax.set(ylim=(0, 1), xlabel="step of the stream", ylabel="online accuracy",
                  title=f"Online learning on {data['task']}")
    stream_ax.legend(fontsize=7, loc="best")
    figure.tight_layout()


def vsml_panel(params: dict[str, Any], trained: dict[str, list] | None = None) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments), showing
    the notebook's ``trained`` learners (``{learner: [Trained per seed]}``) until a run."""
    params = with_preset(params, experiment.PRESETS)  # its preset sets none of the controls
    setup0 = experiment.configure(**params)
    tasks = watchable(setup0)
    task0 = next((t for t in setup0.tasks if t not in experiment.CONTROLS), tasks[0])
    learner_lr = {"vsml": ("lr", "tasks_per_batch"),
                  "meta_rnn": ("meta_rnn_lr", "meta_rnn_tasks_per_batch")}
    specs = (*CONTROLS, Control("task", str, options=tasks, description="task watched"),
             Control("seed", int, 0))
    start = {c.name: params[c.name] for c in CONTROLS if c.name in params}
    controls = Controls(specs, start | {"learner": "vsml", "task": task0, "seed": 0})
    trained = {name: list(runs) for name, runs in (trained or {}).items()}

    def learner_changed(change):  # the lr and batch controls are the chosen learner's
        lr, tasks_per_batch = learner_lr[change["new"]]
        controls.set_values({"lr": params[lr], "tasks_per_batch": params[tasks_per_batch]})

    controls.widgets["learner"].observe(learner_changed, names="value")

    def setup_of(values):
        values = dict(values)
        learner, task, seed = values.pop("learner"), values.pop("task"), values.pop("seed")
        lr, tasks_per_batch = learner_lr[learner]
        values[lr], values[tasks_per_batch] = values.pop("lr"), values.pop("tasks_per_batch")
        setup = experiment.configure(**(params | values | {"theta": "train", "seeds": 1,
                                                             "checkpoint": False}))
        if task not in watchable(setup):
            raise ValueError(f"task {task!r} is not meta-tested here; choose one of "
                             f"{', '.join(watchable(setup))}")
        return setup, learner, task, seed

    def data_of(setup, learner, task, label, losses, accuracies, model, iterations):
        source = watched_source(setup, task)
        return {"learner": learner, "label": label, "losses": losses, "accuracies": accuracies,
                "iterations": iterations, "classes": setup.classes,
                "meta_dataset": setup.meta_dataset,
                "earlier": [r.losses for r in trained.get(learner, [])], "task": task,
                "accuracy": stream_accuracy(model, source, setup.test_episodes),
                "chance": 1 / source.classes}

    def train(values, report):
        setup, learner, task, seed = setup_of(values)
        iterations = setup.learner_config(learner).iterations

        def callback(done, losses, accuracies, model):
            data = data_of(setup, learner, task, f"panel run, seed {seed}", losses, accuracies,
                           model, iterations)
            return report(done / iterations, data)

        result = experiment.meta_train(setup, learner, seed, every=chunk(setup, learner),
                                       callback=callback)
        return Run(setup, learner, task, seed, result)

    panel = Panel("VS-ML: meta-train live, watch it learn online", controls, train, draw,
                  validate=setup_of, figsize=(10.0, 3.6),
                  labels=("meta-iteration", "online cross-entropy"))
    shown = "vsml" if trained.get("vsml") else next((n for n, r in trained.items() if r), None)
    if shown is not None:
        first = trained[shown][0]
        panel.set_result(data_of(setup0, shown, task0, f"notebook's {shown}, seed 0",
                                 first.losses, None, first.model, len(first.losses)),
                         Run(setup0, shown, task0, 0, first))
    viewer = SubLSTMViewer(panel)
    panel.widget.children = (*panel.widget.children, viewer.widget)
    return panel


def sub_lstm_episode(run: Run, key: jax.Array) -> dict[str, np.ndarray]:
    """One episode of the watched task through a VS-ML learner: the stream, the first
    layer's states ``h``, ``c`` (T, A, B, state) after each step, and (one layer only)
    the effective weights ``W`` (T, A, B) of ``experiment.weight_trajectory``."""
    source = watched_source(run.setup, run.task)
    net = experiment.for_classes(run.trained.model, source.classes)
    k_task, k_state = jax.random.split(key)
    xs, ys = source.sample(k_task)
    weights, _, (h, c) = experiment.weight_trajectory(net, xs, ys, k_state)
    return {"ys": np.asarray(ys), "h": np.asarray(h), "c": np.asarray(c),
            "W": np.asarray(weights) if len(net.sizes) == 2 else None}


def draw_states(figure: Figure, episode: dict[str, np.ndarray], t: int, title: str) -> None:
    """Heatmaps over the (input a, output b) grid at step ``t``: W_t (one layer only) and
    the channels of c and h that vary most over the episode, each on the episode's scale."""
    shown = [("W_t, the effective weight", episode["W"])] if episode["W"] is not None else []
    for name in ("c", "h"):
        states = episode[name]
        for k in np.argsort(states.var(axis=(0, 1, 2)))[::-1][:STATES_SHOWN]:
            shown.append((f"{name} channel {k}", states[..., k]))
    axes = figure.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, (name, values) in zip(axes, shown, strict=True):
        limit = max(float(np.abs(values).max()), 1e-6)
        image = ax.imshow(values[t].T, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto",
                          interpolation="nearest")
        figure.colorbar(image, ax=ax, fraction=0.03)
        ax.set_ylabel(name, fontsize=8, rotation=0, ha="right", va="center")
        ax.set_xticks(range(values.shape[1]))
        ax.set_yticks(range(values.shape[2]))
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("input unit a (rows: output unit b)")
    note = "" if episode["W"] is not None else " (W_t only for one VS-ML layer)"
    axes[0].set_title(f"{title}, step {t}, label {episode['ys'][t]}{note}", fontsize=9)
    figure.tight_layout()


class SubLSTMViewer:
    """A slider over the steps of one episode of the watched task and the first VS-ML
    layer's sub-LSTM states (and effective weight) at that step."""

    def __init__(self, panel: Panel):
        self.panel = panel
        self.slider = widgets.IntSlider(value=0, min=0, max=99, description="stream step",
                                        continuous_update=False)
        self.button = widgets.Button(description="Show the sub-LSTMs")
        self.image = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.message = widgets.HTML("")
        self.button.on_click(lambda _: self.show())
        self.slider.observe(self._moved, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.slider, self.button, self.message]),
                                    self.image])
        self._episode = None

    def _moved(self, _) -> None:
        if self._episode is not None:  # an episode is on show: follow the slider
            self.show()

    def show(self) -> bool:
        """Draw the states at the slider's step; False (with a message) when there are none."""
        run = self.panel.result
        if self.panel.state in ("running", "paused") or run is None:
            self.message.value = "run (or wait for) a meta-training first"
            return False
        if not isinstance(run.trained.model, VSMLNetwork):
            self.message.value = ("the Meta-RNN has no sub-LSTMs (it learns in one LSTM's "
                                  "state); pick learner vsml and Run")
            return False
        if self._episode is None or self._episode[0] is not run:
            self._episode = (run, sub_lstm_episode(run, jax.random.key(WATCH_KEY + 1)))
            self.slider.max = len(self._episode[1]["ys"]) - 1
        figure = Figure(figsize=(7, 5))
        draw_states(figure, self._episode[1], self.slider.value, run.task)
        self.image.value = figure_png(figure)
        self.image.layout.display = ""
        self.message.value = ""
        return True
