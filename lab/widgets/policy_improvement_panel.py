"""The policy-improvement panel: train MPO, V-MPO or a search agent live, and look at the
improved policy q over the density of pi at a state picked with a slider.

    panel = policy_improvement_panel(params, results)   # the notebook's parameters and runs
    panel.show()

Training runs one variant (the chosen ``agent``; no comparison) with the controls' values and
the notebook's other parameters; the figure shows the evaluation return against environment
steps for the notebook's runs and the new one. After a run, the viewer's slider picks a step
of an evaluation episode of the newest agent and shows ``improved_policy`` there.
"""

import dataclasses
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import policy_improvement as pi
from lab.train.mpo import MODELS, SEARCH_IN
from lab.widgets.bands import mean_and_range
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel, figure_png

CONTROLS = (
    Control("agent", str, options=pi.AGENTS),
    Control("depth", int, 0, 4),
    Control("branching", int, 1, 64, description="branching M"),
    Control("model", str, options=MODELS),
    Control("search_in", str, options=SEARCH_IN),
    Control("updates_per_step", int, 1, 16),
    Control("seeds", int, 1),
    Control("total_steps", int, 1),
    Control("eval_every", int, 1),
)


def draw_returns(figure: Figure, results: list) -> None:
    """Mean evaluation return (and the seeds' range) against environment steps."""
    ax = figure.add_subplot()
    for i, r in enumerate(results):
        h = r.history
        mean_and_range(ax, np.maximum(h.env_steps, 1), h.returns, label=r.variant.name,
                       color=f"C{i}", alpha=0.15)
    ax.set(xscale="log", xlabel="environment steps per seed", ylabel="evaluation return")
    if results:
        ax.legend(fontsize=8)
    figure.tight_layout()


def policy_improvement_panel(params: dict[str, Any], results: list | None = None) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments), showing the
    notebook's finished ``results`` until a new run replaces them."""
    params = pi.without_preset(params)
    earlier = list(results or [])
    controls = Controls(CONTROLS, {c.name: params[c.name] for c in CONTROLS})

    def setup_of(values):
        return pi.configure(**(params | values | {"compare": False}))

    def train(values, report):
        setup = setup_of(values)
        variant = setup.variant(setup.focus)
        total = variant.config.total_steps
        shown = dataclasses.replace(variant, name=f"{variant.name} (panel run)")

        def callback(history):
            partial = pi.Result(shown, None, history)
            return report(history.env_steps[-1] / total, earlier + [partial])

        result = pi.train(setup, variant, callback=callback)
        return setup, result

    panel = Panel("Policy improvement: MPO, V-MPO, search", controls, train, draw_returns,
                  validate=setup_of, labels=("environment steps per seed", "evaluation return"))
    if earlier:
        setup = pi.configure(**params)
        focus = next((r for r in earlier if r.variant.name == setup.focus), earlier[0])
        panel.set_result(earlier, result=(setup, focus))
    viewer = ImprovedPolicyViewer(panel)
    panel.widget.children = (*panel.widget.children, viewer.widget)
    return panel


class ImprovedPolicyViewer:
    """A slider over the steps of an evaluation episode of the panel's newest agent and the
    improved policy q (sampled actions and weights) over pi's density at that step."""

    def __init__(self, panel: Panel):
        self.panel = panel
        self.slider = widgets.IntSlider(value=0, min=0, max=199, description="episode step",
                                        continuous_update=False)
        self.button = widgets.Button(description="Show q at this step")
        self.image = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.message = widgets.HTML("")
        self.button.on_click(lambda _: self.show())
        self.widget = widgets.VBox([widgets.HBox([self.slider, self.button, self.message]),
                                    self.image])
        self._episode = None

    def show(self) -> bool:
        """Draw q at the slider's step; False (with a message) when there is nothing to show."""
        if self.panel.state in ("running", "paused") or self.panel.result is None:
            self.message.value = "run (or wait for) a training first"
            return False
        setup, result = self.panel.result
        if setup.is_dmc:
            self.message.value = "no viewer on dm_control tasks (their states cannot be replayed)"
            return False
        if self._episode is None or self._episode[0] is not result:
            states, observations = pi.episode_states(setup, result)
            self._episode = (result, states, observations)
            self.slider.max = len(observations) - 1
        _, states, observations = self._episode
        t = self.slider.value
        q = pi.improved_policy(setup, result, states, t)
        figure = Figure(figsize=(5, 3))
        ax = figure.add_subplot()
        pi.plot_improved_policy(ax, q)
        ax.set_title(f"t = {t}, eta = {q['temperature']:.3g}")
        ax.legend(fontsize=8)
        figure.tight_layout()
        self.image.value = figure_png(figure)
        self.image.layout.display = ""
        self.message.value = ""
        return True
