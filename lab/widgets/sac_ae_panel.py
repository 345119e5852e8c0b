"""The SAC-AE panel: train SAC-AE or pixel SAC live on a JAX pixel task, then look at the
observations beside the decoder's reconstructions and at an evaluation episode.

    panel = sac_ae_panel(params, runs)   # the notebook's parameters and finished runs
    panel.show()

Training runs one variant for one seed with the controls' values and the notebook's other
parameters (``lab.experiments.sac_ae.train``, checkpointed: the same configuration resumes);
the figure shows the evaluation return against environment steps beside the notebook's runs,
and, once a run has finished, the newest frames of an evaluation episode above their
reconstructions. Below it, ``EpisodeViewer`` plays an evaluation episode of the newest agent
(the notebook's until a panel run replaces it) frame by frame, the observation beside the
decoder's reconstruction.
"""

import io
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure
from matplotlib.image import imsave

from lab import envs
from lab.experiments import sac_ae as experiment
from lab.runs.params import with_preset
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
    params = with_preset(params, experiment.PRESETS) | {"preset": "default"}
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
                  draw, validate=setup_of, figsize=(9.0, 6.0),
                  labels=("environment steps", "evaluation return"))
    if earlier:
        newest = max(runs, key=lambda r: (r.variant == first_variant,
                                          r.history.eval_returns[-1].mean()))
        panel.set_result({"runs": earlier}, result=(setup0, newest))
    viewer = EpisodeViewer(panel)
    panel.widget.children = (*panel.widget.children, viewer.widget)
    return panel


def frame_png(observation: np.ndarray, reconstruction: np.ndarray | None, scale: int = 4) -> bytes:
    """The newest frame of an observation, beside its reconstruction when there is one, as
    PNG bytes, each pixel drawn ``scale`` x ``scale``."""
    images = [observation] if reconstruction is None else [observation, reconstruction]
    gap = np.full((observation.shape[0], 2, 3), 255, np.uint8)
    row = np.concatenate([images[0], *(x for r in images[1:] for x in (gap, r))], axis=1)
    buffer = io.BytesIO()
    imsave(buffer, np.repeat(np.repeat(row, scale, 0), scale, 1), format="png")
    return buffer.getvalue()


class EpisodeViewer:
    """An evaluation episode of the panel's newest agent, frame by frame: a Play button and a
    slider over its steps, the observation's newest frame beside the decoder's reconstruction
    (SAC-AE; pixel SAC has no decoder, so the frame alone)."""

    def __init__(self, panel: Panel):
        self.panel = panel
        self.button = widgets.Button(description="Show an evaluation episode",
                                     layout=widgets.Layout(width="auto"))
        self.play = widgets.Play(min=0, max=0, interval=100, description="play")
        self.slider = widgets.IntSlider(value=0, min=0, max=0, description="step",
                                        continuous_update=True)
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.image = widgets.Image(format="png", layout=widgets.Layout(display="none"))
        self.message = widgets.HTML("")
        self.pngs: list[bytes] = []
        self.button.on_click(lambda _: self.load())
        self.slider.observe(lambda change: self.show(change["new"]), names="value")
        self.widget = widgets.VBox([widgets.HBox([self.button, self.message]),
                                    widgets.HBox([self.play, self.slider]), self.image])

    def load(self) -> bool:
        """Run one deterministic episode of the newest agent and draw every step's frames;
        False (with a message) when there is no agent to run."""
        if self.panel.state in ("running", "paused") or self.panel.result is None:
            self.message.value = "run (or wait for) a training first"
            return False
        setup, run = self.panel.result
        total, frames = experiment.evaluation_episode(setup, run)
        obs = experiment.observations(frames, list(range(len(frames))), setup.loop.num_frames)
        recon = (experiment.reconstructions(run, obs)
                 if setup.agent_config(run.variant).decoder else [None] * len(obs))
        self.pngs = [frame_png(o[..., -3:], r) for o, r in zip(obs, recon, strict=True)]
        self.play.max = self.slider.max = len(self.pngs) - 1
        self.message.value = (f"{run.variant} seed {run.seed}: return {total:.1f} over "
                              f"{len(frames) - 1} steps"
                              + (" (left: observation, right: reconstruction)"
                                 if recon[0] is not None else ""))
        self.image.layout.display = ""
        self.slider.value = 0
        self.show(0)
        return True

    def show(self, step: int) -> None:
        if self.pngs:
            self.image.value = self.pngs[min(step, len(self.pngs) - 1)]
