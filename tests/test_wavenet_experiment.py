"""The Parallel WaveNet experiment: its parameter checks (one line each, before any work), the
models' conditioning checks, chunked cached sampling, the log-spectral distance against
closed forms, the verdict arithmetic on hand cases, and the live panel."""

import dataclasses
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from IPython.display import Image

from lab.data import speech
from lab.experiments import wavenet as experiment
from lab.models.wavenet import (
    Student,
    WaveNet,
    cached_state,
    check_conditioning,
    sample_cached,
    sample_cached_chunk,
)
from lab.train import wavenet as train
from tests.conftest import WAIT
from tests.smoke import SMOKE

speaks = pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                            reason="Debian's espeak-ng and sox are not installed "
                                   "(scripts/system_deps.sh installs them)")

NOTEBOOK = dict(preset="default", sample_rate=8000, bands=20, sentences=None, held_out=4,
                teacher_channels=16, teacher_layers=10, cycle=10, mixtures=5,
                teacher_steps=1500, teacher_lr=0.002, flows=4, student_channels=16,
                student_layers=6, student_steps=300, student_lr=0.001, batch=8, length=1024,
                student_batch=4, student_length=2048, tune_power=False,
                chunk=100, eval_every=500, draws=4, power_weight=0.01,
                variants=["student", "no_power", "draws_1", "draws_32", "clarinet"],
                eval_utterances=4, timing_lengths=[1000, 4000, 16000],
                timing_widths=[16, 32, 64], timing_steps=256, timing_repeats=5,
                seed=0)


@pytest.mark.parametrize("change, message", [
    ({"sample_rate": 11025}, "sample_rate 11025 is not one the speech data is made at; use "
                             "one of 8000, 16000"),
    ({"sentences": []}, "the sentence list is empty; give at least one sentence"),
    ({"sentences": ["Hello there.", "  "]}, "a sentence is empty; give every sentence"),
    ({"held_out": 16}, "held_out 16 must leave some of the 16 sentences on each side"),
    ({"bands": 128}, "bands 128 leaves 6 mel filters empty at 8000 Hz with 256-sample frames"),
    ({"variants": ["student", "draws_0"]}, "unknown variant 'draws_0'; choose from student"),
    ({"student_steps": 450}, "student_steps 450 must be a positive multiple of chunk 100"),
    ({"length": 100}, "length 100 is shorter than one 256-sample frame"),
    ({"student_length": 300}, "student_length 300 is shorter than one 400-sample frame"),
    ({"tune_power": "yes"}, "tune_power must be True or False, got 'yes'"),
    ({"timing_repeats": 0}, "timing_repeats must be at least 1, got 0"),
    ({"preset": "huge"}, "unknown preset 'huge'; choose one of default, claim, rate_16k"),
])
def test_configure_refuses_bad_values_in_one_line(change, message):
    with pytest.raises(ValueError) as error:
        experiment.configure(**(NOTEBOOK | change))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_missing_espeak_ng_is_refused_naming_the_debian_package(monkeypatch):
    real_which = speech.shutil.which
    monkeypatch.setattr(speech.shutil, "which",
                        lambda name: None if name == "espeak-ng" else real_which(name))
    speech.versions.cache_clear()
    try:
        with pytest.raises(ValueError) as error:
            experiment.configure(**NOTEBOOK)
    finally:
        speech.versions.cache_clear()
    assert str(error.value).startswith("espeak-ng is missing: install Debian's package "
                                       "espeak-ng")


def test_models_refuse_conditioning_they_were_not_built_for():
    teacher = WaveNet(20, channels=4, gate=4, skip=4, layers=2, key=jax.random.key(0))
    student = Student(20, flows=1, channels=4, layers=2, key=jax.random.key(1))
    check_conditioning(teacher, jnp.zeros((10, 20)), 8000)
    with pytest.raises(ValueError, match="conditioning has 40 mel bands, but the WaveNet was "
                                         "built for 20; compute log_mel with bands=20"):
        check_conditioning(teacher, jnp.zeros((10, 40)), 8000)
    with pytest.raises(ValueError, match="audio at 16000 Hz, but the Student was built for "
                                         "8000 Hz"):
        check_conditioning(student, jnp.zeros((10, 20)), 16000)


def test_cached_sampling_in_chunks_draws_what_one_call_draws():
    model = WaveNet(3, channels=4, gate=4, skip=8, layers=4, cycle=3, mixtures=2,
                    key=jax.random.key(0))
    cond = jax.random.normal(jax.random.key(1), (40, 3))
    key = jax.random.key(2)
    whole = sample_cached(model, key, cond)
    pieces, state = [], cached_state(model)
    for start in range(0, 40, 16):  # 16, 16, 8
        audio, state = sample_cached_chunk(model, key, cond[start:start + 16], state, start)
        pieces.append(audio)
    assert jnp.array_equal(jnp.concatenate(pieces), whole)


def test_log_spectral_distance_is_zero_for_the_same_audio_and_20_db_for_ten_times_louder():
    y = speech.synthetic(0.5, 8000)
    assert experiment.log_spectral_distance(y, y, 256, 64) == 0.0
    # 10x the amplitude is 100x the power: 20 dB in every bin (the floor is far below)
    assert experiment.log_spectral_distance(10 * y, y, 256, 64) == pytest.approx(20.0, abs=1e-3)


@speaks
def test_the_evaluation_set_speaks_every_held_out_text_in_a_different_voice():
    setup = experiment.configure(**NOTEBOOK)
    data = experiment.corpus(setup)
    assert data.train_utterances == 12 * len(speech.VOICES)
    ev = experiment.evaluation_set(setup, data)
    assert ev["texts"] == list(speech.SENTENCES[-4:])
    assert len(set(ev["voices"])) == 4  # utterance i: held-out text i in voice i
    assert ev["audio"].shape == (4, max(ev["lengths"]))
    assert ev["cond"].shape == (4, max(ev["lengths"]), 20)
    for row, n in enumerate(ev["lengths"]):
        assert not ev["audio"][row, n:].any()  # silence after the utterance


JITTER = np.array([1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0])  # 8 repeats / utterances


def fake_speed(cached: list[float], student: list[float], lengths: list[int]) -> dict:
    """Rows of ``time_samplers``: at each length the cached teacher's and the student's
    seconds, each repeat's jittered by ``JITTER`` (the student's in reverse order)."""
    rows = [{"length": n, "width": 16,
             "seconds": {"naive": 10 * c, "cached": c, "student": s},
             "repeat_seconds": {"naive": list(10 * c * JITTER), "cached": list(c * JITTER),
                                "student": list(s * JITTER[::-1])},
             "samples_per_second": {"naive": n / (10 * c), "cached": n / c, "student": n / s},
             "real_time_factor": {"naive": 1.0, "cached": 2.0, "student": 3.0}}
            for n, c, s in zip(lengths, cached, student, strict=True)]
    return {"by_length": rows, "by_width": rows[-1:]}


def fake_proxies(rows: dict[str, tuple]) -> dict:
    """``rows``: source -> (bits, entropy bits, kl, lsd, energy) on eight utterances, each
    proxy jittered by ``JITTER``."""
    def per(x):
        return None if x is None else list(x * JITTER)
    sources = {name: {"bits": per(b), "entropy_bits": per(h), "kl": per(k), "lsd": per(d),
                      "energy": per(e)} for name, (b, h, k, d, e) in rows.items()}
    return {"sources": sources, "scorer": {name: "mixture" for name in rows},
            "lengths": [100] * len(JITTER)}


def verdicts(setup, *studies) -> dict[str, str]:
    m = experiment.verdict(setup, *studies)
    return {c["name"]: c["verdict"] for c in experiment.summary(m, setup)["claims"]}


def test_claims_are_judged_on_timing_repeats_and_held_out_utterances():
    setup = experiment.configure(**(NOTEBOOK | {"variants": ["student", "no_power"],
                                                "timing_lengths": [1000, 4000, 16000]}))
    data = experiment.Corpus(None, None, [None] * 16, [], 48, 150.0)
    teachers = {"mixture": {"held_out_bits": 9.0, "parameters": 10, "seconds": 1.0,
                            "receptive_field": 1024}}
    aux = {"kl": [0.3] * 100}
    students = {v: {"parameters": 11, "seconds": 1.0, "aux": aux} for v in setup.variants}
    speed = fake_speed([1.0, 4.0, 16.0], [0.5, 0.5, 1.0], [1000, 4000, 16000])  # 2x, 8x, 16x
    proxies = fake_proxies({"real": (9.0, None, None, 0.0, 1.0),
                            "teacher": (9.5, 9.5, 0.0, 20.0, 1.0),
                            "student": (9.2, 9.3, 0.2, 21.0, 0.8),  # 0.3 bits, 0.2, 5% worse
                            "no_power": (9.0, 9.1, 0.1, 24.0, 0.1)})  # 10 dB down, 14% worse
    m = experiment.verdict(setup, teachers, students, proxies, speed, data)
    assert m["student_over_cached"] == pytest.approx({"1000": 2.0, "4000": 8.0, "16000": 16.0})
    assert m["student_over_naive"]["16000"] == pytest.approx(160.0)
    assert m["student_bits_gap"] == pytest.approx(-0.3)
    assert m["student_lsd_ratio"] == pytest.approx(1.05)
    assert m["student_energy_db_gap"] == pytest.approx(10 * np.log10(0.8))  # -0.97 dB
    assert m["no_power_lsd_ratio"] == pytest.approx(24 / 21)
    assert m["student_train_kl"] == {"mean": pytest.approx(0.3), "std": pytest.approx(0.0)}
    assert m["timing_repeat_seconds"]["16000"]["cached"] == pytest.approx(list(16 * JITTER))
    claims = {c["name"]: c for c in experiment.summary(m, setup)["claims"]}
    assert set(claims) == set(experiment.CLAIMS)
    # every repeat's speed-up at 16,000 samples: 16 x JITTER / JITTER[::-1], mean about 16
    fast = claims["student_faster"]
    assert fast["timing"] and fast["n"] == 8
    assert fast["effect"] == pytest.approx(np.mean(16 * JITTER / JITTER[::-1]) - 1)
    assert fast["p"] == pytest.approx(2 / 256)  # exact sign flips, Holm over the 2 claims
    # the energy gap per utterance is |10 log10 0.8| = 0.97 dB < 1 dB on every utterance;
    # without the power loss 10 dB from the real power against 0.97 (at least 3 dB further)
    assert {c["name"]: c["verdict"] for c in claims.values()} == dict.fromkeys(claims, "holds")

    # 5x at the longest length, not more than at the shortest (8x); the student's LSD 25%
    # above the teacher's; no power loss only 1 dB further from the real power
    speed = fake_speed([1.0, 4.0, 10.0], [0.125, 0.25, 2.0], [1000, 4000, 16000])  # 8, 16, 5
    proxies["sources"]["student"]["lsd"] = list(25.0 * JITTER)
    proxies["sources"]["no_power"]["energy"] = list(0.63 * JITTER)
    got = verdicts(setup, teachers, students, proxies, speed, data)
    assert got["student_faster"] == "smaller than claimed"  # 5x: faster, but not 10x
    assert got["ratio_grows"] == "does not hold"
    assert got["quality_close_lsd"] == "does not hold"
    assert got["quality_close_nll"] == "holds"
    assert got["power_loss_needed"] == "smaller than claimed"  # 1 dB further, not 3

    # four utterances, one student sample on either side of the tolerance: inconclusive
    proxies["sources"]["student"]["bits"] = [9.5, 10.5, 9.6, 10.2]
    proxies["sources"]["teacher"]["bits"] = [9.5] * 4
    m = experiment.verdict(setup, teachers, students, proxies, speed, data)
    claim = {c["name"]: c for c in experiment.summary(m, setup)["claims"]}["quality_close_nll"]
    assert claim["verdict"] == "inconclusive" and claim["n"] == 4


def test_rederive_leaves_claims_untested_without_per_unit_numbers():
    setup = experiment.configure(**NOTEBOOK)
    m = {"timing_lengths": [1000, 16000], "student_over_cached": {"1000": 6.0, "16000": 5.7},
         "student_over_naive": {"1000": 250.0, "16000": 247.0}, "eval_utterances": 4,
         "real_time_factor": {s: {"16000": 1.0} for s in ("naive", "cached", "student")},
         "quality": {"real": {"bits": 9.0}, "teacher": {"bits": 9.5}}}
    params = {k: v for k, v in NOTEBOOK.items() if k != "timing_repeats"}
    out = experiment.rederive(m, params | {"preset": "default"})
    assert [c["verdict"] for c in out["claims"]] == ["not tested"] * 2
    assert out["claims"][0]["to_remake"].startswith("the record has no per-repeat timings")
    assert experiment.summary(m, setup)["claims"][0]["values"] is None


@speaks
def test_wavenet_panel_samples_a_teacher_chunk_by_chunk_and_a_student_in_one_pass():
    from lab.widgets.wavenet_panel import wavenet_panel

    panel = wavenet_panel(NOTEBOOK | SMOKE["13_parallel_wavenet"], chunk=4000)
    assert panel.data is None  # no notebook sample to open on
    panel.min_interval = 0.0
    length = len(experiment.corpus(experiment.configure(**NOTEBOOK)).held_out[0].audio)
    panel.controls.widgets["model"].value = "teacher"
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    assert panel.result["audio"].shape == (length,)
    assert panel.draws >= -(-length // 4000)  # once per chunk at least
    assert panel.player.value[:4] == b"RIFF"
    panel.controls.widgets["model"].value = "student"
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    assert panel.result["audio"].shape == (length,)
    assert np.abs(panel.result["audio"]).max() > 0
    assert isinstance(panel.show(headless=True), Image)


def test_band_levels_split_a_level_change_at_the_split_frequency():
    rate = 8000
    real = np.random.default_rng(0).standard_normal(8000).astype(np.float32) * 0.1
    # 10x quieter everywhere: -20 dB in both bands (every bin far above the floor)
    below, above = experiment.band_levels(0.1 * real, real, 256, 64, rate)
    assert below == pytest.approx(-20.0, abs=0.01) and above == pytest.approx(-20.0, abs=0.01)
    # 10x quieter below 1 kHz only (by the FFT of the whole signal): about -20 dB and 0 dB
    spectrum = np.fft.rfft(real)
    spectrum[np.fft.rfftfreq(len(real), 1 / rate) < 1000] *= 0.1
    whisper = np.fft.irfft(spectrum, len(real)).astype(np.float32)
    below, above = experiment.band_levels(whisper, real, 256, 64, rate)
    assert below == pytest.approx(-20.0, abs=2.0) and above == pytest.approx(0.0, abs=1.0)
    assert experiment.band_levels(real, real, 256, 64, rate) == (0.0, 0.0)


def test_the_power_weight_rule_takes_the_smallest_weight_near_the_best_match():
    """Notebook 13's section 3a on its own 2026-11-25 figures (0.01 and 0.1 are both within
    0.5 dB of the best match: the smaller wins), and on cases by hand."""
    def rows(gaps):
        return [{"power_weight": w, "energy_db_gap": g}
                for w, g in zip((1e-4, 1e-3, 1e-2, 1e-1), gaps, strict=True)]
    assert experiment.choose_power_weight(rows([-14.51, -8.35, 0.05, -0.16])) == 1e-2
    assert experiment.choose_power_weight(rows([-14.5, -8.4, -2.0, 0.3])) == 1e-1
    assert experiment.choose_power_weight(rows([-0.4, -0.1, 0.05, 3.0])) == 1e-4


def tiny_corpus(setup: experiment.Setup, seconds: float = 0.1) -> experiment.Corpus:
    """Two synthetic training utterances and one held out (no espeak-ng needed)."""
    pieces = [speech.synthetic(seconds, setup.sample_rate, seed=s) for s in range(3)]
    audio, cond = train.corpus([(x, experiment.conditioning(x, setup)) for x in pieces[:2]],
                               setup.receptive_field + 1)
    held = speech.Utterance("held out", speech.VOICES[0], 50, pieces[2])
    return experiment.Corpus(audio, cond, [held], [experiment.conditioning(pieces[2], setup)],
                             2, 2 * seconds)


def test_trainings_and_timed_rows_are_kept_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setattr(experiment, "SAVE_EVERY", 0.0)  # a training in progress: every chunk
    setup = experiment.configure(**(NOTEBOOK | {
        "teacher_channels": 2, "teacher_layers": 2, "cycle": 2, "mixtures": 1,
        "teacher_steps": 2, "flows": 1, "student_channels": 2, "student_layers": 1,
        "student_steps": 2, "batch": 1, "length": 256, "student_batch": 1,
        "student_length": 400, "chunk": 1, "eval_every": 1, "checkpoint": True,
        "timing_lengths": [32], "timing_widths": [2]}))
    data = tiny_corpus(setup)
    timings = iter([{"length": 32, "width": 2, "seconds": {"naive": 0.5, "cached": 0.25}}])
    monkeypatch.setattr(experiment, "time_samplers", lambda *args: next(timings))

    def units(kept, on_chunk=None):
        teacher = experiment.train_teacher(setup, data, kept=kept, on_chunk=on_chunk)
        student = experiment.train_student(setup, "student", teacher["model"], data, kept=kept)
        return teacher, student, experiment.sampling_speed(setup, kept=kept)

    def stop(step, loss, held):
        if step == setup.teacher_steps:
            raise KeyboardInterrupt  # the deadline, in the teacher's last chunk

    with pytest.raises(KeyboardInterrupt):
        units(experiment.kept(setup, data), stop)
    assert len(list(tmp_path.glob("wavenet/*/teacher-*.partial.eqx"))) == 1
    first = experiment.kept(setup, data)
    made = units(first)  # the teacher continues after its first chunk
    assert (first.made, first.loaded) == (3, 0)
    assert not list(first.folder.glob("*.partial.eqx"))

    def never(*args, **kwargs):
        raise AssertionError("made again")

    monkeypatch.setattr(experiment, "_train", never)
    monkeypatch.setattr(experiment, "time_samplers", never)
    again = experiment.kept(setup, data)
    read = units(again)
    assert (again.made, again.loaded) == (0, 3) and again.folder == first.folder
    for one, other in zip(made, read, strict=True):
        assert {k: v for k, v in one.items() if k != "model"} == {
            k: v for k, v in other.items() if k != "model"}
    for one, other in zip(made[:2], read[:2], strict=True):
        for a, b in zip(jax.tree.leaves(one["model"]), jax.tree.leaves(other["model"]),
                        strict=True):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)
    with pytest.raises(AssertionError, match="made again"):  # another size: trained anew
        experiment.train_student(dataclasses.replace(setup, student_steps=1), "student",
                                 made[0]["model"], data, kept=again)
