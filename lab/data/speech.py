"""Speech made on this machine, deterministically: Debian's ``espeak-ng`` speaks a fixed list
of sentences in several voices and pitches, and ``sox`` resamples each utterance to the
model's rate (16-bit mono, no dither, so the same text gives the same samples every time).

``utterances(sample_rate)`` returns every ``Utterance`` (text, voice, pitch, audio in
[-1, 1) as float32); ``split`` keeps the last sentences for held-out evaluation (every
voice speaks them, so the real audio of a held-out text is there to compare with).
``log_mel(audio, ...)`` computes the conditioning: log-magnitude mel spectrogram frames, and
``upsample`` repeats each frame ``hop`` times to the sample rate. ``synthetic(...)`` is a test
signal: harmonics of a gliding fundamental with a little noise.

Audio is cached as ``.npy`` under ``lab.data.data_dir() / "speech"``, keyed by the text, the
voice settings, the rate and the two programs' versions.
"""

import functools
import hashlib
import json
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lab.data.download import DataError, data_dir

SAMPLE_RATES = (8000, 16000)

# Short plain sentences written for this workbench (no licence questions), covering most
# English phonemes; the last ``HELD_OUT`` are held out.
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A research workbench should measure what a paper claims.",
    "She sells sea shells by the sea shore.",
    "Seven small boats sailed past the old harbour wall.",
    "Please bring the green notebook to the meeting room.",
    "Rain fell softly on the quiet village all night.",
    "Every good model starts with a careful baseline.",
    "The violin and the drum played a cheerful tune.",
    "Measure twice and cut once, my father used to say.",
    "Bright yellow leaves covered the path in autumn.",
    "How much wood would a woodchuck chuck?",
    "Thirty thousand people watched the final match.",
    "Zebras and giraffes drank from the muddy river.",
    "The judge asked the witness to speak clearly.",
    "Warm bread and fresh butter make a fine breakfast.",
    "Our train leaves the station at half past nine.",
)
HELD_OUT = 4

# (espeak-ng voice, pitch 0-99, words per minute)
VOICES = (("en-us", 35, 150), ("en-us", 65, 150), ("en-gb", 50, 140), ("en-gb-scotland", 45, 150))


class Utterance(NamedTuple):
    text: str
    voice: str
    pitch: int
    audio: np.ndarray  # (samples,) float32 in [-1, 1)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise DataError(f"{name} is missing: install Debian's package {name} "
                        f"(apt-get install {name}, or scripts/system_deps.sh)")
    return path


VERSIONS_FILE = "versions.json"  # beside the cached audio, written by an offline bundle


@functools.cache
def versions() -> dict[str, str]:
    """The first line of ``espeak-ng --version`` and ``sox --version``; on a machine without
    the programs, the versions recorded beside the cached audio (``speech/versions.json``,
    which ``python -m lab bundle`` writes), so that the cache's keys still match."""
    recorded = data_dir() / "speech" / VERSIONS_FILE
    if not all(shutil.which(name) for name in ("espeak-ng", "sox")) and recorded.exists():
        return json.loads(recorded.read_text())
    return {name: subprocess.run([_tool(name), "--version"], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[0]
            for name in ("espeak-ng", "sox")}


def _read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1:
            raise DataError(f"{path}: expected 16-bit mono audio from sox")
        return np.frombuffer(f.readframes(f.getnframes()), "<i2").astype(np.float32) / 32768.0


def cache_path(text: str, voice: str, pitch: int, words_per_minute: int, sample_rate: int
               ) -> Path:
    """Where ``speak`` caches an utterance: keyed by its settings and the programs' versions."""
    key = hashlib.sha256(repr((text, voice, pitch, words_per_minute, sample_rate,
                               versions())).encode()).hexdigest()[:24]
    return data_dir() / "speech" / f"{key}.npy"


def speak(text: str, voice: str, pitch: int, words_per_minute: int, sample_rate: int
          ) -> np.ndarray:
    """``text`` spoken by espeak-ng and resampled by sox to ``sample_rate`` (cached)."""
    if sample_rate not in SAMPLE_RATES:
        raise ValueError(f"sample rate {sample_rate} is not one the speech data is made at; "
                         f"use one of {', '.join(map(str, SAMPLE_RATES))}")
    if not text.strip():
        raise ValueError("a sentence is empty; give every sentence some words")
    cache = cache_path(text, voice, pitch, words_per_minute, sample_rate)
    if cache.exists():
        return np.load(cache)
    with tempfile.TemporaryDirectory() as tmp:
        raw, resampled = Path(tmp) / "raw.wav", Path(tmp) / "out.wav"
        subprocess.run([_tool("espeak-ng"), "-v", voice, "-p", str(pitch), "-s",
                        str(words_per_minute), "-w", str(raw), text], check=True,
                       capture_output=True)
        subprocess.run([_tool("sox"), "-D", str(raw), "-r", str(sample_rate), "-b", "16", "-c",
                        "1", str(resampled)], check=True, capture_output=True)
        audio = _read_wav(resampled)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, audio)
    return audio


def utterances(sample_rate: int = 8000, sentences: tuple[str, ...] = SENTENCES,
               voices: tuple = VOICES) -> list[Utterance]:
    """Every sentence in every voice, sentence-major."""
    if not sentences:
        raise ValueError("the sentence list is empty; give at least one sentence")
    return [Utterance(text, voice, pitch, speak(text, voice, pitch, wpm, sample_rate))
            for text in sentences for voice, pitch, wpm in voices]


def split(items: list[Utterance], held_out: int = HELD_OUT) -> tuple[list, list]:
    """``(train, held_out)``: the utterances of the last ``held_out`` distinct texts held out."""
    texts = list(dict.fromkeys(u.text for u in items))
    if not 0 < held_out < len(texts):
        raise ValueError(f"held_out {held_out} must leave some of the {len(texts)} sentences "
                         "on each side")
    kept = set(texts[-held_out:])
    return [u for u in items if u.text not in kept], [u for u in items if u.text in kept]


def provenance() -> dict:
    """The programs that made the audio, their Debian package versions and the settings."""
    packages = {}
    for package in ("espeak-ng", "sox"):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                                 capture_output=True, text=True)
            packages[package] = out.stdout.strip() or None
        except OSError:  # not a Debian machine (an offline bundle's target, say)
            packages[package] = None
    return {"programs": versions(), "packages": packages, "voices": list(VOICES),
            "sentences": len(SENTENCES), "held_out_sentences": HELD_OUT}


# conditioning -------------------------------------------------------------------------------

def mel_filterbank(sample_rate: int, frame: int, bands: int, low: float = 0.0,
                   high: float | None = None) -> np.ndarray:
    """``(bands, frame // 2 + 1)`` triangular filters evenly spaced on the mel scale (HTK's
    ``2595 log10(1 + f / 700)``), each peaking at 1 on its centre frequency."""
    high = sample_rate / 2 if high is None else high
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hertz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = hertz(np.linspace(mel(low), mel(high), bands + 2))
    freqs = np.linspace(0, sample_rate / 2, frame // 2 + 1)
    rising = (freqs[None] - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None])
    falling = (edges[2:, None] - freqs[None]) / (edges[2:, None] - edges[1:-1, None])
    return np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)


def log_mel(audio: np.ndarray, sample_rate: int, bands: int = 20, frame: int = 256,
            hop: int = 64, floor: float = 1e-5) -> np.ndarray:
    """``(ceil(len / hop), bands)`` log mel magnitudes: Hann-windowed frames of ``frame``
    samples every ``hop``, frame ``i`` centred on sample ``i * hop`` (zero padded at both
    ends)."""
    padded = np.pad(audio, (frame // 2, frame // 2 + hop))
    count = -(-len(audio) // hop)
    index = np.arange(frame)[None] + hop * np.arange(count)[:, None]
    spectrum = np.abs(np.fft.rfft(padded[index] * np.hanning(frame), axis=-1))
    return np.log(np.maximum(spectrum @ mel_filterbank(sample_rate, frame, bands).T, floor))


def upsample(frames: np.ndarray, hop: int, length: int) -> np.ndarray:
    """``(length, bands)``: each frame repeated ``hop`` times (frame ``i`` covers samples
    ``i * hop ... (i + 1) * hop - 1``)."""
    return np.repeat(frames, hop, axis=0)[:length]


def synthetic(seconds: float, sample_rate: int, seed: int = 0, harmonics: int = 5,
              noise: float = 0.01) -> np.ndarray:
    """A test signal: ``harmonics`` harmonics (amplitudes 1/k) of a fundamental gliding from
    110 to 220 Hz, scaled to peak 0.5, plus Gaussian noise of standard deviation ``noise``."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    f0 = 110.0 * 2 ** (t / max(seconds, 1e-9))
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    signal = sum(np.sin(k * phase) / k for k in range(1, harmonics + 1))
    signal = 0.5 * signal / np.abs(signal).max()
    return (signal + noise * rng.standard_normal(len(t))).astype(np.float32)
