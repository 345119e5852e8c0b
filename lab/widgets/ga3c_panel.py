"""The GA3C panel: run GA3C or per-agent A3C on the host, live: return, throughput, queues.

    panel = ga3c_panel(params, learned)   # the notebook's parameters and learning runs
    panel.show()

Run starts the chosen execution (``lab.train.ga3c``) for ``seconds`` with the controls'
counts; every half second the figure shows the episode returns against seconds, the
environment steps, predictions and trainings per second, and the lengths of GA3C's
prediction and training queues (a long prediction queue: too few predictors; a long
training queue: too few trainers). Pause holds the agent, predictor and trainer threads;
Stop ends them all. ``panel.result`` holds the run's ``Result``. Given the notebook's runs it
opens on GA3C's first seed (its returns; the notebook keeps no rates or queues over time).
"""

import dataclasses
from typing import Any

import jax
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import ga3c as experiment
from lab.train.ga3c import run_a3c, run_ga3c
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("execution", str, options=("ga3c", "a3c")),
    Control("agents", int, 1, 128),
    Control("predictors", int, 1, 16),
    Control("trainers", int, 1, 16),
    Control("training_batch", int, 1, 1024),
    Control("learning_rate", float, 1e-6, 1e-1, log=True),
    Control("seconds", float, 1.0, 3600.0, description="seconds to run"),
    Control("seed", int, 0, 99),
)


def snapshot(stats) -> dict[str, Any]:
    """What the figure needs from a run's live counters (``lab.train.ga3c.Stats``)."""
    with stats.lock:
        episodes = np.array(stats.episodes).reshape(-1, 3)
        counts = (stats.seconds(), stats.env_steps, stats.predictions, stats.trainings)
    return {"episodes": episodes, "counts": counts, "queues": stats.queue_lengths()}


def draw(figure: Figure, data: dict[str, Any]) -> None:
    """Returns against seconds; rates over time; queue lengths over time."""
    ax_ret, ax_rate, ax_queue = figure.subplots(1, 3)
    e = data["episodes"]
    if len(e):
        window = max(1, len(e) // 20)
        smooth = np.convolve(e[:, 2], np.ones(window) / window, mode="valid")
        ax_ret.plot(e[window - 1:, 0], smooth, color="C0")
    ax_ret.set(title=f"episode return{data.get('note', '')}", xlabel="seconds")
    history = np.array(data["history"])  # (n, 4): seconds, env steps, predictions, trainings
    if len(history) > 1:
        dt = np.diff(history[:, 0])
        for i, (name, color) in enumerate((("env steps", "C0"), ("predictions", "C1"),
                                           ("trainings x 10", "C2")), 1):
            rate = np.diff(history[:, i]) / np.maximum(dt, 1e-9) * (10 if i == 3 else 1)
            ax_rate.plot(history[1:, 0], rate, color=color, label=name)
        ax_rate.legend(fontsize=7)
    ax_rate.set(title="per second", xlabel="seconds")
    queues = data["queue_history"]
    for name in ("prediction", "training"):
        values = [q.get(name, 0) for q in queues]
        if any(values):
            ax_queue.plot(history[:len(values), 0], values, label=name)
    if ax_queue.lines:
        ax_queue.legend(fontsize=7)
    ax_queue.set(title="queue lengths", xlabel="seconds")
    figure.tight_layout()


def ga3c_panel(params: dict[str, Any], learned: dict[str, list] | None = None) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments); it opens
    on GA3C's first run in ``learned`` (``experiment.learning``), if there is one."""
    values = params | {"execution": "ga3c", "seconds": min(float(params["seconds"]), 60.0),
                       "seed": 0}
    controls = Controls(CONTROLS, {c.name: values[c.name] for c in CONTROLS})

    def setup_of(values):
        return experiment.configure(**(params | {k: v for k, v in values.items()
                                                 if k in experiment.PARAMETERS}))

    def train(values, report):
        setup = setup_of(values)
        config = dataclasses.replace(setup.host, agents=values["agents"],
                                     predictors=values["predictors"],
                                     trainers=values["trainers"])
        history, queue_history = [], []

        def callback(stats):
            now = snapshot(stats)
            history.append(now["counts"])
            queue_history.append(now["queues"])
            return report(min(now["counts"][0] / values["seconds"], 1.0),
                          {"episodes": now["episodes"], "history": history,
                           "queue_history": queue_history})

        run = run_ga3c if values["execution"] == "ga3c" else run_a3c
        return run(config, jax.random.key(values["seed"]), seconds=values["seconds"],
                   callback=callback, seed=values["seed"])

    panel = Panel("GA3C and A3C on the host, live", controls, train, draw, validate=setup_of,
                  figsize=(12.0, 3.4), labels=("seconds", "episode return"))
    runs = (learned or {}).get("ga3c")
    if runs:
        panel.set_result({"episodes": runs[0].episodes, "history": [], "queue_history": [],
                          "note": ": the notebook's, seed 0"}, runs[0])
    return panel
