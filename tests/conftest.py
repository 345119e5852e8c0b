import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.smoke import compile_settings

SETTINGS_SET = "LAB_TESTS_COMPILE_SETTINGS"  # set once the first process has chosen them


def _compile_less() -> str | None:
    """Compile less in every process of the test run: the xdist workers and all they start
    (notebook kernels, papermill, sweep workers, simulated-device scripts) inherit these
    variables, which jax reads at import. Most optimisations off (``tests.smoke.COMPILE``,
    where the user has not set their own, and XLA's quicker-compiling CPU fusion emitters:
    ``tests.smoke.compile_settings``), and one persistent XLA compilation cache for the
    run: a program one process compiled is loaded, not compiled again, by the next that
    needs it. A new, empty folder per run, removed at the end, so nothing an earlier run
    compiled (another jax, other code, other flags) is ever read.

    Returns the cache folder when this process made it (the xdist controller, or a plain
    pytest); None when it inherited one (a worker) or the user set their own."""
    if os.environ.get(SETTINGS_SET) != "1":  # the first process; its workers inherit them
        os.environ.update(compile_settings(os.environ, sys.executable), **{SETTINGS_SET: "1"})
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return None
    folder = tempfile.mkdtemp(prefix="lab-tests-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    return folder


OWN_CACHE = _compile_less()  # before anything imports jax, which reads them at import

import nbformat  # noqa: E402
import pytest  # noqa: E402
from nbformat.v4 import new_code_cell, new_notebook  # noqa: E402

from lab.envs import dmc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pytest_unconfigure(config):
    if OWN_CACHE:
        shutil.rmtree(OWN_CACHE, ignore_errors=True)


def write_notebook(path: Path, parameters: str, *cells: str) -> Path:
    """A notebook with a tagged parameters cell followed by ``cells``."""
    nb = new_notebook(
        cells=[new_code_cell(parameters, metadata={"tags": ["parameters"]})]
        + [new_code_cell(c) for c in cells],
        metadata={"kernelspec": {"name": "lab", "display_name": "Python (lab)",
                                 "language": "python"}},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WAIT = 300
"""Seconds a test waits for something that takes a moment idle: generous, so that a busy
machine (CI beside other work) makes a test slower, never red."""


def wait_for(condition, what: str, seconds: float = WAIT, poll: float = 0.05):
    """Poll ``condition()`` until it returns something true, and return that; fail with
    ``what`` was awaited once ``seconds`` pass. Tests wait on this, never on a fixed sleep."""
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:g} s for {what}")
        time.sleep(poll)
    return value


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "runs").glob("*") if p.is_dir())


def provenance(run_dir: Path) -> dict:
    return json.loads((run_dir / "provenance.json").read_text())


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """An empty dataset cache: nothing outside the test is read or written."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("LAB_DATA_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def checkpoint_dir(tmp_path, monkeypatch) -> Path:
    """Checkpoints go to the test's own folder, never to ~/.cache (kernels inherit this)."""
    folder = tmp_path / "checkpoints"
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def suite():
    """``dm_control.suite``, imported in the tests (not at collection, once per xdist worker);
    skips the test, saying what to install, without a GL library or dm_control."""
    problem = dmc.gl_problem(dmc.choose_gl_backend())
    if problem:
        pytest.skip(problem)
    return pytest.importorskip(
        "dm_control.suite", reason="dm_control is not installed: pip install -e '.[dev,dmc]'")


def pytest_collection_modifyitems(items):
    """End-to-end notebook runs (marked ``slow``, minutes each) first, so that the xdist
    workers (``--dist worksteal``) share them out early instead of finishing on one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
