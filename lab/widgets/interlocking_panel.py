"""The interlocking panel: train one rule live and see its pipeline schedule.

    panel = interlocking_panel(params, timing, studies)   # the notebook's
    panel.show()

Run trains the chosen task (Fashion-MNIST's ResNet or the character language model) with
the chosen rule (global, local, pairwise, 3-wise, or any ``<n>-wise``) for ``steps`` steps
and one seed, ``eval_every`` steps per chunk (``lab.train.interlocking.make_train``); the
left plot shows the test metric against steps for this run and the runs before it in this
panel. The right plot is the schedule model's timeline of four batches on four devices
(``lab.parallel.interlocking.simulate``) for the rule, fed with the op times the notebook
measured (``timing``): forward passes, heads, pull-backs and updates, and the waits between
them. Pause holds training between two chunks; Stop ends it. ``panel.result`` holds the
run's curve. Given the notebook's studies it opens on the first task's curves (each rule's
mean over seeds and their range) and the schedule of the rule chosen.
"""

from typing import Any

import jax
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import interlocking as experiment
from lab.parallel import interlocking as schedule
from lab.train import interlocking as train
from lab.widgets.bands import mean_and_range
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

COLOURS = {"forward": "C0", "head": "C2", "input": "C1", "params": "C3", "full": "C4",
           "update": "0.5"}


def draw_schedule(ax, timeline: schedule.Timeline, title: str) -> None:
    """A Gantt chart: one row per device, one bar per op, coloured by kind."""
    for e in timeline.events:
        ax.barh(e.op.component, 1e3 * (e.end - e.start), left=1e3 * e.start, height=0.6,
                color=COLOURS[e.op.kind], edgecolor="white", linewidth=0.3)
    for kind, colour in COLOURS.items():
        ax.barh(-10, 0, color=colour, label=kind)
    ax.set(ylim=(timeline.components - 0.5, -0.5), yticks=range(timeline.components),
           yticklabels=[f"device {k + 1}" for k in range(timeline.components)],
           xlabel="ms", title=title)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_curve, ax_gantt = figure.subplots(1, 2)
    for i, (label, (steps, values)) in enumerate(data["runs"].items()):
        if np.ndim(values) == 2:  # the notebook's seeds
            mean_and_range(ax_curve, steps, values, label=label, color=f"C{i % 10}", marker=".")
        else:
            ax_curve.plot(steps, values, marker=".", color=f"C{i % 10}", label=label)
    ax_curve.set(xlabel="steps", ylabel=data["metric"], title=data["task"])
    ax_curve.legend(fontsize=7)
    if data.get("timeline") is not None:
        draw_schedule(ax_gantt, data["timeline"], data["schedule_title"])
    else:
        ax_gantt.set_axis_off()
    figure.tight_layout()


def interlocking_panel(params: dict[str, Any], timing: dict[str, dict] | None = None,
                       studies: dict[str, dict] | None = None) -> Panel:
    """A panel over the notebook's ``params``; ``timing`` (task -> ``experiment.timings``)
    feeds the schedule plot; it opens on ``studies`` (task -> ``experiment.train_rules``),
    if given."""
    setup = experiment.configure(**params)
    controls = Controls((
        Control("task", str, options=experiment.TASKS),
        Control("rule", str),
        Control("steps", int, 1, 100_000),
        Control("seed", int, 0, 999),
    ), {"task": setup.tasks[0], "rule": "pairwise", "steps": setup.steps(setup.tasks[0]),
        "seed": setup.seed})
    tasks: dict[str, experiment.Task] = {}
    runs: dict[str, tuple[list, list]] = {}

    def validate(values):
        n, mode = train.parse_rule(values["rule"], experiment.COMPONENTS)
        train.check_n(experiment.COMPONENTS, n)
        if values["steps"] % setup.eval_every:
            raise ValueError(f"steps must be a multiple of eval_every ({setup.eval_every})")
        return n, mode

    def timeline_of(name, n, mode):
        if not timing or name not in timing:
            return None
        times = schedule.Times(**timing[name]["times"])
        return schedule.simulate(experiment.COMPONENTS, n, times, 4, mode=mode)

    def run(values, report):
        n, mode = validate(values)
        name = values["task"]
        if name not in tasks:
            tasks[name] = experiment.task(setup, name)
        t = tasks[name]
        _, start, chunk, measure = train.make_train(
            t.init, t.sample, t.evaluate, n, experiment.optimizer(t), train.cross_entropy,
            None, setup.eval_every, mode)
        keys = jax.random.split(jax.random.key(values["seed"]), 2)
        state = start(keys[:1])
        timeline = timeline_of(name, n, mode)
        label = f"{values['rule']}, seed {values['seed']}"
        steps, metric = runs.setdefault(f"{name}: {label}", ([], []))
        steps.clear()
        metric.clear()
        chunks = values["steps"] // setup.eval_every
        for i in range(chunks):
            state, _ = chunk(t.data, state, jax.vmap(jax.random.fold_in, (0, None))(keys[1:], i))
            steps.append((i + 1) * setup.eval_every)
            metric.append(float(np.asarray(measure(t.data, state[0])[t.metric])[0]))
            data = {"runs": {k.split(": ", 1)[1]: v for k, v in runs.items()
                             if k.startswith(f"{name}: ")},
                    "metric": t.metric, "task": name, "timeline": timeline,
                    "schedule_title": f"{values['rule']}: 4 batches, schedule model"}
            if report((i + 1) / chunks, data) is False:
                break
        return {"steps": list(steps), t.metric: list(metric)}

    panel = Panel("Interlocking backpropagation, live", controls, run, draw, validate=validate,
                  figsize=(10.0, 3.4), labels=("steps", "test metric"))
    values = controls.values()
    study = (studies or {}).get(values["task"])
    if study:
        panel.set_result({
            "runs": {f"{rule} (notebook)": (r["steps"], r["curve"])
                     for rule, r in study["runs"].items()},
            "metric": study["metric"], "task": values["task"],
            "timeline": timeline_of(values["task"], *train.parse_rule(
                values["rule"], experiment.COMPONENTS)),
            "schedule_title": f"{values['rule']}: 4 batches, schedule model"})
    return panel
