"""The Parallel WaveNet panel: sample a held-out utterance live and listen to it.

    panel = wavenet_panel(params, teachers, students)   # the notebook's parameters and models
    panel.show()

Run draws the chosen held-out utterance (its text and voice were never trained on) from the
chosen model, conditioned on the real utterance's log-mels. A teacher (``teacher``: the
mixture WaveNet; ``gaussian_teacher``: ClariNet's) samples with its cached sampler
``chunk`` samples per call, and the figure shows the waveform growing with the samples per
second so far; Stop ends it between chunks. A student (any distilled variant) samples the
whole utterance in one parallel pass. The figure then shows the sample's spectrogram beside
the real one's, and a player below the figure plays the sample. ``panel.result`` holds the
audio, the seconds and the samples per second. Without trained models (``teachers`` /
``students`` None) the models are untrained: the same cost, noise for audio.
"""

import io
import time
import wave
from typing import Any

import ipywidgets as widgets
import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from lab.experiments import wavenet as experiment
from lab.models.wavenet import WaveNet, cached_state, sample_cached_chunk
from lab.train import wavenet as train
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """``audio`` in [-1, 1] as a 16-bit mono WAV file's bytes (for an ``ipywidgets.Audio``)."""
    pcm = np.round(np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(pcm.tobytes())
    return buffer.getvalue()


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_wave, ax_sample, ax_real = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1, 1]})
    rate, total = data["sample_rate"], len(data["real"])
    audio = data["audio"]
    ax_wave.plot(np.arange(total) / rate, data["real"], lw=0.3, color="0.7", label="real")
    ax_wave.plot(np.arange(len(audio)) / rate, audio, lw=0.3, color="C1", label=data["model"])
    ax_wave.set(xlim=(0, total / rate), xlabel="seconds", title=data["title"])
    ax_wave.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    for ax, x, name in ((ax_sample, audio, data["model"]), (ax_real, data["real"], "real")):
        if len(x) >= data["frame"]:
            power = np.asarray(train.stft_power(jnp.asarray(x), data["frame"], data["hop"]))
            ax.imshow(10 * np.log10(power.T + 1e-8), origin="lower", aspect="auto", vmin=-80,
                      vmax=20, extent=(0, len(x) / rate, 0, rate / 2000))
        ax.set(xlim=(0, total / rate), xlabel="seconds", ylabel="kHz", title=name)
    figure.tight_layout()


def wavenet_panel(params: dict[str, Any], teachers: dict[str, dict] | None = None,
                  students: dict[str, dict] | None = None, proxies: dict | None = None,
                  chunk: int = 2000) -> Panel:
    """A panel over the notebook's ``params`` and its trained ``teachers`` / ``students``
    (``experiment.train_teacher`` / ``train_student`` results by kind / variant); with
    ``proxies`` (``experiment.quality``) it opens on the notebook's student sample of the
    first held-out utterance."""
    setup = experiment.configure(**params)
    data = experiment.corpus(setup)
    names = ["teacher"] + (["gaussian_teacher"] if "clarinet" in setup.variants else [])
    names += list(setup.variants)
    utterances = {f"{i}: {u.text[:28]} ({u.voice}, {u.pitch})": i
                  for i, u in enumerate(data.held_out)}
    controls = Controls((
        Control("utterance", str, options=tuple(utterances)),
        Control("model", str, options=tuple(names)),
        Control("seed", int, 0, 999),
    ), {"utterance": next(iter(utterances)), "model": "student" if "student" in names
        else names[-1], "seed": setup.seed})
    player = widgets.Audio(format="wav", autoplay=False, loop=False)

    def model_for(name: str):
        kind = "gaussian" if name in ("gaussian_teacher", "clarinet") else "mixture"
        key = jax.random.key(setup.seed)
        if name in ("teacher", "gaussian_teacher"):
            if teachers is not None and kind in teachers:
                return teachers[kind]["model"], "trained"
            return experiment.build_teacher(setup, key, kind), "untrained"
        if students is not None and name in students:
            return students[name]["model"], "trained"
        return experiment.build_student(setup, key, "gaussian" if kind == "gaussian"
                                        else "logistic"), "untrained"

    step = jax.jit(sample_cached_chunk)
    student_pass = jax.jit(lambda s, k, c: train.student_sample(s, k, c)[0])

    def run(values, report):
        index = utterances[values["utterance"]]
        real = data.held_out[index].audio
        cond = jnp.asarray(data.held_out_cond[index])
        model, weights = model_for(values["model"])
        key = jax.random.key(values["seed"])
        base = {"real": real, "model": values["model"], "sample_rate": setup.sample_rate,
                "frame": setup.frame, "hop": setup.hop}
        begin = time.perf_counter()
        if isinstance(model, WaveNet):
            pieces, state = [], cached_state(model)
            padded = jnp.pad(cond, ((0, -len(real) % chunk), (0, 0)))  # one chunk shape
            for start in range(0, len(real), chunk):
                audio, state = step(model, key, padded[start:start + chunk], state, start)
                pieces.append(np.asarray(audio))
                sofar = np.concatenate(pieces)[:len(real)]
                rate = len(sofar) / (time.perf_counter() - begin)
                title = f"{values['model']} ({weights}): {rate:,.0f} samples/s"
                if report(len(sofar) / len(real), base | {"audio": sofar, "title": title}) \
                        is False:
                    break
        else:
            sofar = np.asarray(jax.block_until_ready(student_pass(model, key, cond)))
        seconds = time.perf_counter() - begin
        rate = len(sofar) / seconds
        title = f"{values['model']} ({weights}): {rate:,.0f} samples/s, " \
                f"{rate / setup.sample_rate:.3g}x real time"
        report(1.0, base | {"audio": sofar, "title": title})
        player.value = wav_bytes(sofar, setup.sample_rate)
        return {"audio": sofar, "seconds": seconds, "samples_per_second": rate}

    panel = Panel("Parallel WaveNet sampling, live", controls, run, draw, figsize=(12.0, 3.0),
                  labels=("seconds", "amplitude"))
    panel.widget.children += (player,)
    panel.player = player
    if proxies is not None and "student" in proxies["samples"]:
        length = proxies["lengths"][0]  # the evaluation set's first is held-out utterance 0
        audio = proxies["samples"]["student"][0, :length]
        panel.set_result({"real": data.held_out[0].audio, "audio": audio, "model": "student",
                          "sample_rate": setup.sample_rate, "frame": setup.frame,
                          "hop": setup.hop, "title": "student (trained): the notebook's sample"},
                         {"audio": audio})
        player.value = wav_bytes(audio, setup.sample_rate)
    return panel
