"""The A2C panel: train one configuration of the jitted A2C, live.

    panel = a2c_panel(params, (returns, env_steps))   # the notebook's parameters and curves
    panel.show()

Run trains the controls' configuration (``lab.experiments.a2c.curves``, one seed) for
``total_steps`` environment steps; after every ``eval_every`` steps the figure shows the mean
return of the episodes that ended since the last point. Pause holds the training between
evaluations; Stop ends it. ``panel.result`` holds ``(returns, env_steps)``. It opens on the
notebook's curves (their mean over its seeds and their range) when given them.
"""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab.experiments import a2c as experiment
from lab.widgets.bands import mean_and_range
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("learning_rate", float, 1e-6, 1e-1, log=True),
    Control("t_max", int, 1, 200),
    Control("discount", float, 0.5, 1.0),
    Control("envs", int, 1, 1024),
    Control("total_steps", int, 1, 100_000_000, description="environment steps"),
    Control("seed", int, 0, 99),
)


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax = figure.subplots()
    returns = np.asarray(data["returns"], dtype=float)
    if returns.ndim == 2:  # the notebook's seeds
        mean_and_range(ax, data["env_steps"], returns, label="notebook's run", color="C0",
                       marker="o")
        ax.legend(fontsize=7)
    else:
        ax.plot(data["env_steps"], returns, "o-", color="C0")
    ax.set(xlabel="environment steps", ylabel="episode return",
           title=f"A2C, t_max {data['t_max']}, learning rate {data['learning_rate']:.2g}, "
                 f"discount {data['discount']}{data.get('note', '')}")
    figure.tight_layout()


def a2c_panel(params: dict[str, Any], result: tuple[np.ndarray, np.ndarray] | None = None
              ) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments); it opens on
    ``result``, the notebook's ``(returns, env_steps)`` of ``experiment.curves``, if given."""
    controls = Controls(CONTROLS, {c.name: params[c.name] for c in CONTROLS})

    def setup_of(values):
        return experiment.configure(**(params | values | {"seeds": 1}))

    def train(values, report):
        setup = setup_of(values)
        seen: dict[str, Any] = setup.config | {"env_steps": [], "returns": []}
        step = setup.eval_every

        def on_evaluation(e, returns):
            seen["env_steps"].append((e + 1) * step)
            seen["returns"].append(float(np.nanmean(returns)))
            return report((e + 1) / setup.evaluations, seen)

        return experiment.curves([setup.config], game=setup.game, sticky=setup.sticky,
                                 envs=setup.envs, steps=setup.total_steps,
                                 evaluations=setup.evaluations, seeds=1, seed=setup.seed,
                                 entropy_cost=setup.entropy_cost, on_evaluation=on_evaluation)

    panel = Panel("A2C on MinAtar, live", controls, train, draw, validate=setup_of,
                  figsize=(7.0, 3.4), labels=("environment steps", "episode return"))
    if result is not None:
        returns, env_steps = result
        done = np.isfinite(returns[0]).any(axis=0)  # the evaluations run (fewer if pruned)
        panel.set_result(experiment.configure(**params).config | {
            "env_steps": env_steps[0, done].tolist(),
            "returns": returns[0][:, done].tolist(), "note": " (the notebook's)"}, result)
    return panel
