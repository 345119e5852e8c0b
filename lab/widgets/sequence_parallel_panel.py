"""The sequence-parallelism panel: train the retrieval Transformer on N devices, live.

    panel = sequence_parallel_panel(params, trained)   # the notebook's parameters and runs
    panel.show()

Run trains the controls' configuration (``lab.experiments.sequence_parallel.train``): one
device with full attention (``devices`` 1), or the sequence cut over ``devices`` simulated
devices with Ring Self-Attention (``rsa``), blockwise ring attention (``ring``) or attention
within each chunk only (``local``, the ablation). Every 25 steps the figure shows the loss
and the accuracy against chance. Pause holds the training between chunks; Stop ends it.
``panel.result`` holds the curves. It opens on the notebook's RSA run (seed 0) when given
the notebook's runs.
"""

import dataclasses
from typing import Any

from matplotlib.figure import Figure

from lab.experiments import sequence_parallel as experiment
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("devices", int, 1, 64, description="sequence devices N"),
    Control("attention", str, options=("rsa", "ring", "local")),
    Control("steps", int, 1, 100_000),
    Control("learning_rate", float, 1e-5, 1e-1, log=True),
    Control("seed", int, 0, 99),
)
CHUNK = 25


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_loss, ax_acc = figure.subplots(1, 2)
    steps = range(1, len(data["loss"]) + 1)
    ax_loss.plot(steps, data["loss"], color="C0")
    ax_loss.set(xlabel="step", ylabel="loss", title=data["title"])
    ax_acc.plot(steps, data["accuracy"], color="C1")
    ax_acc.axhline(data["chance"], color="k", ls=":", label="chance")
    ax_acc.set(xlabel="step", ylabel="accuracy", ylim=(0, 1))
    ax_acc.legend(fontsize=7)
    figure.tight_layout()


def sequence_parallel_panel(params: dict[str, Any],
                            trained: dict[str, list[dict]] | None = None) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments); it opens
    on the RSA run over all devices in ``trained`` (``experiment.runs``), if given."""
    values = {"attention": "rsa"} | {c.name: params[c.name] for c in CONTROLS
                                     if c.name in params}
    controls = Controls(CONTROLS, values)

    def setup_of(values):
        setup = experiment.configure(**(params | {k: values[k] for k in
                                                  ("steps", "learning_rate", "seed")}))
        n = values["devices"]
        if n > setup.devices:
            raise ValueError(f"the notebook simulates {setup.devices} devices; choose at most "
                             f"{setup.devices}")
        if setup.task.length % n:
            raise ValueError(f"length {setup.task.length} does not divide over {n} devices; "
                             "use a divisor of it")
        return setup

    def train(values, report):
        setup = dataclasses.replace(setup_of(values), steps=values["steps"])
        n = values["devices"]
        title = "one device" if n == 1 else f"{values['attention']}, N={n}"

        def on_chunk(done, curves):
            return report(done / setup.steps, curves | {"title": title,
                                                         "chance": setup.task.chance})

        return experiment.train(setup, n, values["attention"], seed=values["seed"],
                                on_chunk=on_chunk, chunk=CHUNK)

    panel = Panel("Sequence parallelism, live", controls, train, draw, validate=setup_of,
                  figsize=(8.0, 3.2), labels=("step", "loss"))
    setup = experiment.configure(**params)
    runs = (trained or {}).get(f"RSA, N={setup.devices}")  # experiment.runs's name for it
    if runs:
        panel.set_result(runs[0] | {"title": f"rsa, N={setup.devices}: the notebook's seed 0",
                                    "chance": setup.task.chance}, runs[0])
    return panel
