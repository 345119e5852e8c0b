"""The SAC-AE panel: train SAC-AE or pixel SAC live on a JAX pixel task, then look at the
observations beside the decoder's reconstructions and at an evaluation episode.

    panel = sac_ae_panel(params, runs)   # the notebook's parameters and finished runs
    panel.show()

Training runs one variant for one seed with the controls' values and the notebook's other
parameters (``lab.experiments.sac_ae.train``, checkpointed: the same configuration resumes);
the figure shows the evaluation return against environment steps beside the notebook's runs,
and, once a run has finished, the newest frames of an evaluation episode above their
reconstructions.
"""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab import envs
from lab.experiments import sac_ae as experiment
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("env", str, options=tuple(envs.ENVS)),
    Control("variant", str, options=tuple(experiment.VARIANTS)),
    Control("image_size", int, envs.MIN_IMAGE_SIZE, 128),
    Control("action_repeat", int, 1),
    Control("steps", int, 1),
    Control("init_steps", int, 0),
    Control("eval_every", int, 1),
    Control("batch_size", int, 1),
    Control("hidden_dim", int, 1),
)
FRAMES_SHOWN = 5


def draw(figure: Figure, data: dict[str, Any]) -> None:
    """Returns against environment steps; with a finished run, frames and reconstructions."""
    runs, frames, recon = data["runs"], data.get("frames"), data.get("reconstructions")
    rows = 3 if frames is not None else 1
    grid = figure.add_gridspec(rows, FRAMES_SHOWN, height_ratios=[2, 1, 1][:rows])
    ax = figure.add_subplot(grid[0, :])
    for i, (label, steps, returns) in enumerate(runs):
        ax.plot(steps, returns, color=f"C{i}", label=label, marker=".")
    ax.set(xlabel="environment steps", ylabel="evaluation return")
    ax.legend(fontsize=8)
    if frames is not None:
        for j in range(FRAMES_SHOWN):
            for row, images, name in ((1, frames, "observation"), (2, recon, "reconstruction")):
                a = figure.add_subplot(grid[row, j])
                a.imshow(images[j])
                a.set_xticks([]), a.set_yticks([])
                if j == 0:
                    a.set_ylabel(name, fontsize=8)
    figure.tight_layout()


def _curve(label: str, run, setup) -> tuple[str, np.ndarray, np.ndarray]:
    h = run.history
    done = ~np.isnan(h.eval_returns).any(axis=1)
    return (label, h.eval_steps[done] * setup.action_repeat, h.eval_returns[done].mean(axis=1))


def sac_ae_panel(params: dict[str, Any], runs: list | None = None) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments, with
    ``variants``) that shows the notebook's finished ``runs`` until a new run is made."""
    params = params | experiment.PRESETS[params["preset"]] | {"preset": "default"}
    first_variant = params["variants"][0]
    setup0 = experiment.configure(**params)
    earlier = [_curve(f"{r.variant} seed {r.seed}", r, setup0) for r in (runs or [])]
    start = {c.name: params[c.name] for c in CONTROLS if c.name != "variant"}
    controls = Controls(CONTROLS, start | {"variant": first_variant})

    def setup_of(values):
        values = dict(values)
        variant = values.pop("variant")
        return experiment.configure(**(params | values | {"variants": [variant],
                                                            "seeds": 1})), variant

    def train(values, report):
        setup, variant = setup_of(values)
        total = setup.loop.steps

        points = []  # (environment steps, mean evaluation return) so far

        def on_eval(step, returns):
            points.append((step * setup.action_repeat, float(np.mean(returns))))
            steps, means = map(np.asarray, zip(*points, strict=True))
            partial = (f"{variant} (panel run)", steps, means)
            return report(step / total, {"runs": earlier + [partial]})

        run = experiment.train(setup, variant, 0, on_eval=on_eval)
        if setup.agent_config(variant).decoder:
            _, frames = experiment.evaluation_episode(setup, run)
            times = np.linspace(0, len(frames) - 1, FRAMES_SHOWN).astype(int).tolist()
            obs = experiment.observations(frames, times, setup.loop.num_frames)
            panel.data = {"runs": panel.data["runs"], "frames": obs[..., -3:],
                          "reconstructions": experiment.reconstructions(run, obs)}
        return setup, run

    panel = Panel("SAC-AE: soft actor-critic from pixels with an autoencoder", controls, train,
                  draw, validate=setup_of, figsize=(9.0, 6.0))
    if earlier:
        panel.set_result({"runs": earlier})
    return panel
