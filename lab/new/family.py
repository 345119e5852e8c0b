"""A new method's family in every layer, ready to run: ``python -m lab new NAME``.

``new_family(root, name, title=..., paper=...)`` writes, under the next free notebook
number ``NN``::

    lab/models/NAME.py          a small Equinox model of one example
    lab/train/NAME.py           its loss (loss, aux), optimizer and a jitted, seed-vmapped loop
    lab/experiments/NAME.py     parameters, presets, the claim declared as data, the study
    lab/widgets/NAME_panel.py   the live panel (Run / Pause / Stop)
    notebooks/NN_NAME.ipynb     the notebook: parameters, claim, run, verdict, panel, compare
    tests/test_NAME.py          closed forms, refusals and a smoke run of the notebook
    benchmarks/NAME.py          a ratio measured side by side
    docs/papers/NAME.md         the paper's page: its claims, our set-up, recorded runs, history

and adds the notebook's row to the README's table. Every file comes from
``lab/new/templates`` with the name, number, title and paper put in; the claim's quote and
source stay placeholders (``lab.runs.verdict.PLACEHOLDER``) that ``lab claims verify``
refuses until the researcher writes the paper's own words. A name that is taken, is not a
lowercase identifier or shadows a package is refused in one line before anything is
written.
"""

import importlib
import importlib.util
import json
import keyword
import re
import sys
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).parent / "templates"
# the notebook's smoke parameters (tests/test_NAME.py and tests/test_notebooks.py run them)
SMOKE = {"steps": 40, "eval_every": 20, "seeds": 2}
# names a family's modules may not take: lab's own packages' public names
PACKAGES = ("lab.models", "lab.train", "lab.experiments", "lab.widgets")


class NewError(ValueError):
    """A one-line refusal: nothing was written."""


def targets(name: str, number: str) -> dict[str, str]:
    """Template -> the path it is written to (relative to the project's root)."""
    return {"model.py": f"lab/models/{name}.py", "train.py": f"lab/train/{name}.py",
            "experiment.py": f"lab/experiments/{name}.py",
            "panel.py": f"lab/widgets/{name}_panel.py",
            "notebook.py": f"notebooks/{number}_{name}.ipynb",
            "test.py": f"tests/test_{name}.py", "benchmark.py": f"benchmarks/{name}.py",
            "paper.md": f"docs/papers/{name}.md"}


def next_number(root: Path) -> str:
    """The next free two-digit notebook number under ``root/notebooks``."""
    taken = [int(m.group(1)) for p in (root / "notebooks").glob("*.ipynb")
             if (m := re.match(r"(\d+)_", p.name))]
    return f"{max(taken, default=-1) + 1:02d}"


def check(root: Path, name: str, title: str, paper: str) -> None:
    """Raise :class:`NewError` (one line) for a name or text ``new_family`` must refuse."""
    if not ((root / "lab").is_dir() and (root / "notebooks").is_dir()):
        raise NewError(f"{root} is not the project's root (no lab/ and notebooks/ there); run "
                       "python -m lab new from the folder that holds them, or pass --root")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise NewError(f"{name!r} is not a lowercase Python identifier (letters, digits and _, "
                       "starting with a letter, not a keyword); choose e.g. 'toy_method'")
    if name in sys.stdlib_module_names or name in sys.builtin_module_names or \
            importlib.util.find_spec(name) is not None:
        raise NewError(f"{name!r} shadows the package {name} that Python imports by that "
                       "name; choose another name")
    for package in PACKAGES:
        if name in getattr(importlib.import_module(package), "__all__", ()):
            raise NewError(f"{name!r} is a name {package} exports; choose another name")
    taken = [p for p in targets(name, "*").values() if list(root.glob(p))]
    if taken:
        raise NewError(f"{name!r} exists already ({', '.join(taken)}); choose another name, or "
                       "remove those files first")
    for label, text in (("--title", title), ("--paper", paper)):
        if "\n" in text or '"""' in text or "\\" in text or not text.strip():
            raise NewError(f"{label} {text!r} must be one line of text, without \\ or \"\"\"")


def render(name: str, number: str, title: str, paper: str) -> dict[str, str]:
    """Every file's text, by its path under the root."""
    words = {"NAME": name, "NUMBER": number, "TITLE": title, "TITLE_PY": repr(title),
             "PAPER": paper, "PAPER_PY": repr(paper)}
    out = {}
    for template, path in targets(name, number).items():
        text = Template((TEMPLATES / f"{template}.tmpl").read_text()).substitute(words)
        out[path] = notebook(text, name) if path.endswith(".ipynb") else text
    return out


def notebook(text: str, name: str) -> str:
    """A notebook's JSON from the percent format (``# %%`` code, ``# %% [markdown]``
    markdown whose lines start with ``# ``; ``tags=["parameters"]`` after the marker)."""
    cells = []
    for i, chunk in enumerate(re.split(r"^# %%", text, flags=re.M)[1:]):
        header, _, body = chunk.partition("\n")
        source = body.strip("\n")
        meta: dict = {}
        if tags := re.search(r"tags=(\[.*\])", header):
            meta["tags"] = json.loads(tags.group(1))
        cell = {"cell_type": "code", "execution_count": None, "id": f"cell-{i}",
                "metadata": meta, "outputs": [], "source": source}
        if "[markdown]" in header:
            source = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                               for line in source.splitlines())
            cell = {"cell_type": "markdown", "id": f"cell-{i}", "metadata": meta,
                    "source": source}
        cell["source"] = source.splitlines(keepends=True)
        cells.append(cell)
    doc = {"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {
        "kernelspec": {"display_name": "Python (lab)", "language": "python", "name": "lab"},
        "language_info": {"name": "python"},
        "lab": {"validate": f"lab.experiments.{name}:configure", "smoke": SMOKE}}}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def readme_row(name: str, number: str, title: str, paper: str) -> str:
    return (f"| `notebooks/{number}_{name}.ipynb` | {paper}; [its page](docs/papers/{name}.md) "
            f"| {title}: made by `python -m lab new {name}`, a method against a baseline, one "
            "claim whose quote is still to fill |")


def add_to_readme(root: Path, row: str) -> bool:
    """The row after the last row of the README's notebook table; False without one."""
    readme = root / "README.md"
    if not readme.exists():
        return False
    lines = readme.read_text().splitlines(keepends=True)
    rows = [i for i, line in enumerate(lines) if line.startswith("| `notebooks/")]
    if not rows:
        return False
    lines.insert(rows[-1] + 1, row + "\n")
    readme.write_text("".join(lines))
    return True


def new_family(root: Path, name: str, *, title: str | None = None, paper: str | None = None
               ) -> list[Path]:
    """Write the family (see the module docstring); returns the files written. Refuses with
    :class:`NewError` before writing anything."""
    root = Path(root)
    title = title or name.replace("_", " ").capitalize()
    paper = paper or "FILL IN: Authors, Title (Venue Year)"
    check(root, name, title, paper)
    number = next_number(root)
    files = render(name, number, title, paper)
    written = []
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        written.append(root / path)
    if add_to_readme(root, readme_row(name, number, title, paper)):
        written.append(root / "README.md")
    return written
