"""The offline bundle (``python -m lab bundle``): its data, its refusals, the wheel
bookkeeping and run.sh. Downloading the wheels needs the package registries, which tests may
not use: that step was checked by hand (benchmarks/RESULTS.md: a bundle installed with
``pip install --no-index --target`` ran notebook 00)."""

import gzip
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lab.data import speech, text
from lab.runs import bundle
from tests.conftest import WAIT


def test_pins_wheels_and_platforms():
    freeze = ("jax==0.10.2\nPyYAML==6.0.4\n-e git+https://x/y#egg=lab\n"
              "lab @ file:///src\n# a comment\nzope.interface==7.0  # pinned\n")
    assert bundle.pins(freeze) == {"jax": "0.10.2", "pyyaml": "6.0.4", "zope-interface": "7.0"}
    assert bundle.wheel_pin("PyYAML-6.0.4-cp311-cp311-manylinux_2_17_x86_64.whl") == (
        "pyyaml", "6.0.4")
    tags = bundle.platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert "manylinux2014_x86_64" in tags and "manylinux_2_29_x86_64" not in tags
    assert bundle.platforms("macosx_11_0_arm64") == ["macosx_11_0_arm64"]


def test_wheels_the_target_has_at_the_same_version_are_left_out(tmp_path):
    for name in ("jax-0.10.2-py3-none-any.whl", "jaxlib-0.10.2-cp311-cp311-x.whl",
                 "lab-0.1.0-py3-none-any.whl"):
        (tmp_path / name).touch()
    have = {"jax": "0.10.2", "jaxlib": "0.10.1", "lab": "0.1.0"}
    assert [p.name for p in bundle.already_there(tmp_path, have)] == [
        "jax-0.10.2-py3-none-any.whl"]  # another jaxlib, and never the project itself


@pytest.mark.parametrize("args, message", [
    (["--python", "three"], "--python 'three' is not a Python version; give one such as 3.12"),
    (["--have", "missing.txt"], "--have missing.txt is not a file; give the target's"),
])
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, args,
                                                                    message, monkeypatch):
    from lab.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "bundle"
    assert main(["bundle", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()
    out.mkdir()
    (out / "kept.txt").write_text("mine")
    assert main(["bundle", str(out)]) == 2
    assert "exists and is not an empty folder; give a new folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["kept.txt"]


def test_the_data_reads_back_offline_without_the_system_packages(tmp_path, data_dir,
                                                                 monkeypatch):
    """The bundle's data folder (one sentence, one rate: the same code as every one) read as
    LAB_DATA_DIR on a machine without dict-devil, espeak-ng or sox: the corpus from its copy,
    the audio from the cache under the recorded programs' versions."""
    if not text.corpus_file().exists() or speech.shutil.which("espeak-ng") is None:
        pytest.skip("needs dict-devil and espeak-ng here (scripts/system_deps.sh)")
    monkeypatch.setattr(speech, "SENTENCES", speech.SENTENCES[:1])
    monkeypatch.setattr(speech, "SAMPLE_RATES", (8000,))
    out = tmp_path / "data"
    missing = bundle.write_data(out)
    assert all(line.startswith("fashion_mnist/") for line in missing)  # where not installed
    here = text.load_text()
    voice, pitch, wpm = speech.VOICES[0]
    said = speech.speak(speech.SENTENCES[0], voice, pitch, wpm, 8000)

    monkeypatch.setenv("LAB_DATA_DIR", str(out))  # now on the target
    gone = tmp_path / "no" / "devil.dict.dz"
    path, *rest = text._CORPORA["devils_dictionary"]
    monkeypatch.setitem(text._CORPORA, "devils_dictionary", (gone, *rest))
    assert text.corpus_file() == out / "text" / path.name
    there = text.load_text()
    assert np.array_equal(there.train, here.train) and there.vocabulary == here.vocabulary
    monkeypatch.setattr(speech.shutil, "which", lambda name: None)
    speech.versions.cache_clear()
    try:
        assert speech.versions() == speech.json.loads(
            (out / "speech" / speech.VERSIONS_FILE).read_text())
        assert np.array_equal(speech.speak(speech.SENTENCES[0], voice, pitch, wpm, 8000), said)
    finally:
        speech.versions.cache_clear()
    with gzip.open(out / "text" / path.name, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == rest[1]


def test_run_sh_refuses_another_python_in_one_line(tmp_path):
    script = bundle.write_run_sh(tmp_path, "3.2", ["dmc"])
    assert "lab[dmc]" in script.read_text()
    done = subprocess.run([str(script), "run"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 2 and "holds wheels for Python 3.2" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "site").exists()


def test_the_targets_versions_are_kept_where_wheels_of_them_exist(tmp_path, monkeypatch):
    """A stand-in index: the target has jax 0.11.2 (its CUDA build) where the index's newest
    is 0.12, numpy 2.5.2, and a soupsieve with no wheel for this Python. jax and numpy
    resolve to the target's versions and are left out; soupsieve ships another version and
    says so in one line."""
    index = {"jax": ["0.10.2", "0.11.2", "0.12.0"], "numpy": ["2.3.0", "2.5.2"],
             "soupsieve": ["2.10"]}

    def pip(*args):
        dest = Path(args[args.index("--wheel-dir") + 1])
        (dest / "lab-0.1.0-py3-none-any.whl").touch()

    def download(python, platform, dest, requirement, pinned=None, deps=True):
        wanted = [requirement.split("==")[0]] if not deps else list(index)
        chosen = {}
        for name in wanted:
            version = (pinned or {}).get(name) or (
                requirement.split("==")[1] if not deps else index[name][-1])
            if version not in index[name]:
                raise bundle.RunnerError("pip download failed: no matching distribution")
            chosen[name] = version
        for name, version in chosen.items():
            (dest / f"{name}-{version}-py3-none-any.whl").touch()

    monkeypatch.setattr(bundle, "_pip", pip)
    monkeypatch.setattr(bundle, "_download", download)
    said = []
    have = {"jax": "0.11.2", "numpy": "2.5.2", "soupsieve": "4.1.3", "lab": "0.1.0"}
    left_out = bundle.write_wheels(tmp_path / "w", "3.12", "manylinux_2_28_x86_64", [], have,
                                   said.append)
    assert sorted(p.name for p in left_out) == ["jax-0.11.2-py3-none-any.whl",
                                                "numpy-2.5.2-py3-none-any.whl"]
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == [
        "lab-0.1.0-py3-none-any.whl", "soupsieve-2.10-py3-none-any.whl"]
    assert said == ["  no wheel of the target's soupsieve==4.1.3 for Python 3.12: other "
                    "versions are shipped, into the bundle's own folder"]


def _wheel(folder: Path, name: str, requires: str, main: str) -> Path:
    """A minimal pure-Python wheel of package ``name`` 0.1.0 needing ``requires``."""
    path = folder / f"{name}-0.1.0-py3-none-any.whl"
    info = f"{name}-0.1.0.dist-info"
    files = {f"{name}/__init__.py": "", f"{name}/__main__.py": main,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n"
                                 f"Requires-Dist: {requires}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


def test_run_sh_installs_a_bundle_whose_dependencies_the_target_has(tmp_path):
    """A bundle made with --have ships only what the target lacks: here the project's wheel
    alone, needing numpy, which this interpreter has. run.sh installs it offline into an
    empty folder (pip --target ignores installed packages, so it must not resolve again)."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "project").mkdir()
    _wheel(tmp_path / "wheels", "lab", "numpy>=1", "import numpy\nprint('ran', numpy.__name__)")
    script = bundle.write_run_sh(tmp_path, f"{sys.version_info[0]}.{sys.version_info[1]}", [])
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=WAIT,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                               "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ran numpy"
    assert (tmp_path / "site" / "lab" / "__main__.py").exists()
