"""Why ClariNet's student whispers (issue 56 item 4): one Gaussian teacher, then the ClariNet
student from the same initial weights and crops under several losses; prints, per loss, the
energy of its samples on the held-out utterances (their mean power over the real ones', the
notebook's proxy) and the training KL of the last chunk.

    .venv/bin/python benchmarks/wavenet_whisper.py [--variants before authors x3 rect x30 kl]

Notebook 13's default parameters (a 1,500-step teacher, 300 student steps): about 3.5 min
for the teacher and 1.5 min per variant on 2 cores. Results: docs/papers/parallel_wavenet.md.
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lab.experiments import wavenet as ex  # noqa: E402
from lab.runs import notebook_parameters  # noqa: E402
from lab.train import wavenet as train  # noqa: E402

# name: (log-scale floor inside the KL, STFT term's weight, STFT)
VARIANTS = {"before": (-16.0, 1.0, "hann"), "authors": (-6.0, 1.0, "hann"),
            "x3": (-6.0, 3.0, "hann"), "rect": (-6.0, 1.0, "rect"),
            "x30": (-6.0, 30.0, "hann"), "kl": (-6.0, 0.0, "hann")}


def rectangular_frame_loss(x, y, frame: int, hop: int):
    """The authors' STFT term: magnitudes with no window, frames centred (reflect padding
    of half a frame, as ``torch.stft``'s default), their mean squared difference."""
    def magnitude(v):
        v = jnp.pad(v, frame // 2, mode="reflect")
        count = (v.shape[0] - frame) // hop + 1
        index = np.arange(frame)[None] + hop * np.arange(count)[:, None]
        return jnp.sqrt(jnp.abs(jnp.fft.rfft(v[index], axis=-1)) ** 2 + 1e-10)
    return jnp.mean((magnitude(x) - magnitude(y)) ** 2)


def loss_with(setup, floor: float, weight: float, stft: str):
    hann = train.clarinet_stft(setup.sample_rate)
    scale = setup.sample_rate / 22050  # the authors' 1,024 points, hop 256 at 22.05 kHz
    rect = (round(1024 * scale), round(256 * scale))

    def loss(student, key, x, c, teacher):
        sample, mean, log_scale = train.student_sample(student, key, c)
        params = teacher(sample, c)
        kl, reg = train.regularised_kl(mean, log_scale, params[:, 0], params[:, 1], floor)
        frames = (train.spectral_frame_loss(sample, x, *hann) if stft == "hann"
                  else rectangular_frame_loss(sample, x, *rect))
        return kl.mean() + 4 * reg.mean() + weight * frames, {
            "kl": kl.mean(), "regulariser": reg.mean(), "stft": frames}
    return loss


def energy(student, cond, lengths, real_power) -> np.ndarray:
    samples = np.asarray(ex._student_samples(student, jax.random.key(7), cond)[0])
    powers = [np.mean(x[:n] ** 2) for x, n in zip(samples, lengths, strict=True)]
    return np.array(powers) / real_power


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args(argv)
    defaults = {k: p.default for k, p in notebook_parameters(
        ROOT / "notebooks" / "13_parallel_wavenet.ipynb").items() if k in ex.PARAMETERS}
    setup = ex.configure(**defaults)
    data = ex.corpus(setup)
    start = time.perf_counter()
    teacher = ex.train_teacher(setup, data, "gaussian")["model"]
    print(f"Gaussian teacher: {time.perf_counter() - start:.0f} s", flush=True)
    audio, cond, lengths = ex.held_out_arrays(data)
    lengths = np.asarray(lengths)
    real_power = np.array([np.mean(np.asarray(a)[:n] ** 2)
                           for a, n in zip(audio, lengths, strict=True)])
    key = jax.random.key(setup.seed + 2)  # the notebook's initial student
    e = energy(ex.build_student(setup, key, "gaussian"), cond, lengths, real_power)
    print(f"{'untrained':>8}: energy {e.mean():.3f} ({e.min():.3f}-{e.max():.3f})", flush=True)
    for name in args.variants:
        start = time.perf_counter()
        out = ex._train(setup, ex.build_student(setup, key, "gaussian"),
                        loss_with(setup, *VARIANTS[name]), setup.student_steps,
                        setup.student_lr, data, frozen=teacher,
                        crops=(setup.student_batch, setup.student_length))
        e = energy(out["model"], cond, lengths, real_power)
        last = {k: float(np.mean(v[-setup.chunk:])) for k, v in out["aux"].items()}
        print(f"{name:>8}: energy {e.mean():.3f} ({e.min():.3f}-{e.max():.3f}); last chunk "
              + ", ".join(f"{k} {v:.3g}" for k, v in last.items())
              + f"; {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
