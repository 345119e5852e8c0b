"""The install files agree with each other, and the README covers every notebook."""

import json
import re
import tomllib

import yaml

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    (pip_section,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    python = next(d for d in conda if d.startswith("python"))
    assert python.removeprefix("python") == PYPROJECT["requires-python"]
    assert "pip" in conda
    (install,) = pip_section
    extras = re.fullmatch(r"-e \.\[(.*)\]", install).group(1).split(",")
    assert sorted(extras) == sorted(PYPROJECT["optional-dependencies"])
    # packages named in both (conda-forge builds of pip dependencies) ask for the same versions
    for package in conda:
        if package.split(">")[0].split("=")[0] not in ("python", "pip"):
            assert package in PYPROJECT["dependencies"], f"{package} is not in pyproject.toml"


def test_mujoco_stays_below_4():
    # mujoco 4.0.0 breaks dm-control 1.0.50 (MjModel has no attribute flex_vertedge).
    (mujoco,) = [d for d in PYPROJECT["optional-dependencies"]["dmc"] if d.startswith("mujoco")]
    assert "<4" in mujoco


def test_readme_describes_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{notebook.name}" in readme, f"README does not mention {notebook.name}"
    assert "make reports" in readme and "make test" in readme


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


PATH_IN_TEXT = re.compile(r"(?<![\w/.-])((?:lab|benchmarks|notebooks|scripts|docs|tests|results"
                          r"|sweeps|jupyter)/[\w./-]*\w)(?![\w*<])")


def test_every_path_the_readme_and_the_notebooks_name_exists():
    """A file or folder named in README.md or in a notebook's markdown (`lab/...`,
    `benchmarks/...`, ...) exists: a moved module leaves no stale pointer (globs and
    placeholders such as results/11_* or runs/<run> are not paths)."""
    texts = {"README.md": (ROOT / "README.md").read_text()}
    # the docs pages too, but the guide to `lab new`, whose paths are the family it makes
    texts |= {f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))
              if p.name != "new-method.md"}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        texts[notebook.name] = "\n".join("".join(c["source"]) for c in cells
                                         if c["cell_type"] == "markdown")
    missing = [f"{name}: {m.group(1)}" for name, text in texts.items()
               for m in PATH_IN_TEXT.finditer(text) if not (ROOT / m.group(1)).exists()]
    assert not missing, missing
    assert PATH_IN_TEXT.search("see `lab/parallel.py`").group(1) == "lab/parallel.py"
