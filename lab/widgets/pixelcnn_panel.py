"""The PixelCNN panel: sample live at a chosen resolution and watch the image fill in.

    panel = pixelcnn_panel(params, study, samples=grids, timing=timing)   # the notebook's
    panel.show()

Run draws one image from the chosen model (``sequential``, ``multiscale`` or ``shallow``)
at the chosen size. The sequential PixelCNN fills in pixel by pixel in raster order (one
network evaluation each, on the rows the pixel sees: ``lab.train.pixelcnn.sample_windowed``;
the figure is redrawn every ``rows`` rows); the multiscale model
starts from its ``base x base`` image and fills in group by group, three network
evaluations per doubling. At the training size (32) the models are the notebook's trained
ones (seed 0); at other sizes they have untrained weights (the cost is the same, the images
are noise). The figure shows the canvas so far (unsampled pixels grey) and counts the
evaluations and seconds; Stop ends a sequential run between rows. ``panel.result`` holds
the image and the counts. Given the notebook's samples and timings it opens on the chosen
model's first sample and its sampler's measured cost at the training size.
"""

import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import pixelcnn as experiment
from lab.models.pixelcnn import GatedPixelCNN
from lab.train import pixelcnn as train
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_image, ax_cost = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.4]})
    ax_image.imshow(data["canvas"], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax_image.set(title=data["title"], xticks=[], yticks=[])
    ax_cost.plot(data["evaluations"], data["seconds"], marker=".")
    ax_cost.set(xlabel="network evaluations so far", ylabel="seconds",
                title=data.get("cost_title", f"{data['evaluations'][-1]} evaluations, "
                                             f"{data['seconds'][-1]:.2f} s"))
    figure.tight_layout()


def shown(image: np.ndarray, known: np.ndarray, size: int, levels: int) -> np.ndarray:
    """An image as the panel shows it at ``size x size``: levels in [0, 1], unknown pixels
    0.5 grey, a coarser stage upsampled by repetition."""
    picture = np.where(known, image / (levels - 1), 0.5)
    factor = size // picture.shape[0]
    return np.repeat(np.repeat(picture, factor, 0), factor, 1)


def pixelcnn_panel(params: dict[str, Any], study: dict[str, Any] | None = None,
                   rows: int = 1, *, samples: dict[str, np.ndarray] | None = None,
                   timing: dict[str, Any] | None = None) -> Panel:
    """A panel over the notebook's ``params``; ``study`` (``experiment.train_models``) gives
    the trained models used at the training size. With ``samples``
    (``experiment.sample_grid``) and ``timing`` (``experiment.sampling_times``) it opens on
    the notebook's first sample of the chosen model and that sampler's cost."""
    setup = experiment.configure(**params)
    sizes = tuple(sorted(set(setup.timing_sizes) | {experiment.SIZE}))
    controls = Controls((
        Control("model", str, options=experiment.MODELS),
        Control("size", int, options=sizes),
        Control("seed", int, 0, 999),
    ), {"model": setup.models[-1], "size": experiment.SIZE, "seed": setup.seed})

    def model_for(kind: str, size: int):
        if study is not None and size == experiment.SIZE and kind in study["runs"]:
            return experiment.unstacked(study["runs"][kind]["models"], 0), "trained"
        return experiment.build(setup, kind, size, jax.random.key(setup.seed)), "untrained"

    sequential = eqx.filter_jit(train.sample_windowed)  # the naive sampler's samples
    group = eqx.filter_jit(train.sample_group)

    def run(values, report):
        kind, size = values["model"], values["size"]
        model, weights = model_for(kind, size)
        key = jax.random.key(values["seed"])
        title = f"{kind}, {size}x{size}, {weights}"
        counts, seconds = [0], [0.0]
        begin = time.perf_counter()
        if isinstance(model, GatedPixelCNN):
            canvas = jnp.zeros((size, size), jnp.int32)
            for row in range(0, size, rows):
                stop = min(size, row + rows) * size
                canvas, count = sequential(model, key, canvas, jnp.int32(row * size),
                                           jnp.int32(stop))  # traced: one compile
                counts.append(counts[-1] + int(count))
                seconds.append(time.perf_counter() - begin)
                known = np.arange(size * size).reshape(size, size) < stop
                data = {"canvas": shown(np.asarray(canvas), known, size, setup.levels),
                        "title": title, "evaluations": counts, "seconds": seconds}
                if report(stop / size**2, data) is False:
                    break
            return {"image": np.asarray(canvas), "evaluations": counts[-1],
                    "seconds": seconds[-1]}
        # multiscale: the base image, then each group, one call each, reported as it lands
        k_base, group_key = train.stage_keys(key)
        stages = 1 + 3 * model.scales

        def show(image, known, evaluations, stage):
            counts.append(counts[-1] + evaluations)
            seconds.append(time.perf_counter() - begin)
            data = {"canvas": shown(np.asarray(image), known, size, setup.levels),
                    "title": f"{title}: stage {stage} of {stages - 1}", "evaluations": counts,
                    "seconds": seconds}
            return report((stage + 1) / stages, data)

        image, count = sequential(model.base_model, k_base,
                                  jnp.zeros((model.base, model.base), jnp.int32))
        going = show(image, np.ones((model.base, model.base), bool), int(count), 0)
        for s in range(model.scales):
            fine = jnp.zeros((image.shape[0] * 2,) * 2, jnp.int32).at[::2, ::2].set(image)
            for g in range(3):
                if going is False:
                    break
                fine, count = group(model, fine, s, g, group_key(s, g))
                going = show(fine, known_pixels(fine.shape[0], g), 1 + int(count), 1 + 3 * s + g)
            image = fine
        return {"image": np.asarray(image), "evaluations": counts[-1], "seconds": seconds[-1]}

    panel = Panel("PixelCNN sampling, live", controls, run, draw, figsize=(8.0, 3.4),
                  labels=("network evaluations so far", "seconds"))
    kind = controls.values()["model"]
    timed = "windowed" if kind == "sequential" else kind  # the sampler Run uses
    row = (timing or {}).get(timed, {}).get(experiment.SIZE)
    if samples is not None and kind in samples and row is not None:
        image = samples[kind][0]
        count = row["deep"] + row["shallow"]
        panel.set_result({
            "canvas": shown(image, np.ones(image.shape, bool), experiment.SIZE, setup.levels),
            "title": f"{kind}, {experiment.SIZE}x{experiment.SIZE}, trained: the notebook's",
            "evaluations": [0, count], "seconds": [0.0, row["seconds"]],
            "cost_title": f"{count} evaluations, {row['seconds']:.2f} s per batch of "
                          f"{setup.timing_batch} (timed above)"},
            {"image": image, "evaluations": count, "seconds": row["seconds"],
             "batch": setup.timing_batch})
    return panel


def known_pixels(size: int, group: int) -> np.ndarray:
    """Which pixels of a ``size x size`` multiscale canvas are sampled once ``group`` (0, 1,
    2: the paper's groups 2, 3, 4) is."""
    known = np.zeros((size, size), bool)
    known[::2, ::2] = True
    for r, c in ((0, 1), (1, 0), (1, 1))[:group + 1]:
        known[r::2, c::2] = True
    return known
