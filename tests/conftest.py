import importlib.util
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from lab.envs import dmc

ROOT = Path(__file__).resolve().parents[1]


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
