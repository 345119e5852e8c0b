"""The package map as code: no module under ``lab/`` imports from a higher layer, and package
``__init__``s re-export lazily (``lab.lazy``), so importing a package imports none of its
modules. Source is read, never run (and one small subprocess imports the packages)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LAB = ROOT / "lab"

# Lowest first. A module may import from its own layer or a lower one, never a higher one.
# Packages in one layer are peers (lab.train.proxprop uses lab.optim and lab.models).
LAYERS = [
    # the root package (its __version__), the lazy re-export helper, the compile watch
    {"lab", "lab.lazy", "lab.compile_watch"},
    {"lab.data", "lab.envs"},
    {"lab.models", "lab.optim", "lab.rl", "lab.causal"},
    {"lab.parallel"},  # meshes, shardings, ring attention, the interlocking schedule
    {"lab.train"},
    {"lab.runs"},  # the runner, parameters, records, claims, reports
    {"lab.sweeps"},  # runs notebooks through lab.runs; report_phase (lab.sweeps.phases)
    {"lab.experiments"},  # each paper's studies; re-exports record, run_dir, report_phase
    {"lab.widgets"},  # panels over the experiments
    # python -m lab: dispatches to lab.runs and lab.sweeps; lab.new writes a new family
    {"lab.cli", "lab.__main__", "lab.new"},
]
# Not an import and so not checked, rightly: the runner imports the experiment module that a
# notebook's metadata names (lab.runs.params, importlib.import_module of a string read from
# the notebook, e.g. "lab.experiments.wavenet:validate"): the notebook chooses it, as a user
# chooses the notebook; lab.runs depends on no experiment.

# Package __init__s that import their own modules when imported, and why.
EAGER = {
    "lab.rl": "its function search shares the name of its module lab.rl.search",
    "lab.causal": "its function ges shares the name of its module lab.causal.ges",
}


def _packages() -> dict[str, ast.Module]:
    return {".".join(init.parent.relative_to(ROOT).parts): ast.parse(init.read_text())
            for init in sorted(LAB.rglob("__init__.py"))}


def _homes(tree: ast.Module) -> dict[str, str] | None:
    """The ``_HOMES`` literal of a lazy ``__init__``, else None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] \
                == ["_HOMES"]:
            return ast.literal_eval(node.value)
    return None


def _layer(module: str) -> int:
    """The layer of a module: that of the longest name in LAYERS it is or lies under."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        for rank, layer in enumerate(LAYERS):
            if prefix in layer and (prefix != "lab" or module == "lab"):
                return rank
    raise AssertionError(f"{module} is in no layer; add its package to LAYERS")


def _files() -> dict[str, Path]:
    """Every module under lab/ by its name (a package by its own name)."""
    files = {}
    for path in sorted(LAB.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


STATEMENT = re.compile(  # import ..., or from ... import ... (parenthesised, with comments)
    r"^[ \t]*((?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(?:\((?:[^)#]|#.*)*\)|.*))", re.M)


def _import_statements(source: str) -> ast.Module:
    """The import statements of ``source`` (at any depth), found by a regular expression and
    each parsed on its own: parsing every file whole costs about 0.6 s. A docstring's line
    that reads as an import comes along; the test parses a file whole before blaming it."""
    body = []
    for match in STATEMENT.finditer(source):
        try:
            body += ast.parse(match.group(1)).body
        except SyntaxError:  # prose that starts with "from" or "import"
            continue
    return ast.Module(body=body, type_ignores=[])


def _imports(name: str, tree: ast.Module) -> set[str]:
    """Every lab module that ``name`` imports (at top level, in functions, under
    TYPE_CHECKING), and the homes of its lazy re-exports."""
    package = name if (LAB / Path(*name.split(".")[1:]) / "__init__.py").exists() \
        else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1],
                                 *filter(None, [node.module])])
            found.add(base)
            if base == "lab":  # from lab import parallel: the package lab.parallel
                found |= {f"lab.{alias.name}" for alias in node.names}
    for home in (_homes(tree) or {}).values():
        module = home.partition(":")[0]
        found.add(package + module if module.startswith(".") else module)
    return {m for m in found if m == "lab" or m.startswith("lab.")}


def _upward(name: str, tree: ast.Module) -> list[str]:
    return [f"{name} (layer {_layer(name)}) imports {imported} (layer {_layer(imported)})"
            for imported in sorted(_imports(name, tree)) if _layer(imported) > _layer(name)]


def test_no_module_imports_a_higher_layer():
    files = _files()
    assert {"lab.runs.runner", "lab.sweeps.phases", "lab.cli", "lab.experiments"} <= set(files)
    upward = []
    for name, path in files.items():
        source = path.read_text()
        whole = path.name == "__init__.py"  # small, and _HOMES is no import statement
        found = _upward(name, ast.parse(source) if whole else _import_statements(source))
        if found and not whole:  # a docstring's example is no import
            found = _upward(name, ast.parse(source))
        upward += found
    assert not upward, "\n".join(upward)


def test_the_layer_check_can_fail():
    tree = ast.parse("from lab.train.interlocking import trained_on\nimport lab.runs.records\n"
                     "from lab import experiments\n")
    imported = _imports("lab.parallel.interlocking", tree)
    assert imported == {"lab.train.interlocking", "lab.runs.records", "lab", "lab.experiments"}
    assert [m for m in sorted(imported) if _layer(m) > _layer("lab.parallel")] == [
        "lab.experiments", "lab.runs.records", "lab.train.interlocking"]
    homes = ast.parse('_HOMES = {"record": "lab.runs.records", "mlp": ".feedforward"}')
    assert _imports("lab.models", homes) == {"lab.runs.records", "lab.models.feedforward"}
    assert _layer("lab.sweeps.phases") > _layer("lab.runs.records") > _layer("lab.train")
    source = ('"""Use it so:\n\n    from lab.cli import main\n"""\n\n\ndef f():\n'
              "    from lab.train import (  # a (comment)\n        mpo,\n    )\n"
              "    import lab.runs as runs\n")
    found = _imports("lab.models.x", _import_statements(source))
    assert found == {"lab.cli", "lab.train", "lab.runs"}  # the docstring's line too
    assert _imports("lab.models.x", ast.parse(source)) == {"lab.train", "lab.runs"}


def test_package_inits_import_none_of_their_modules():
    for package, tree in _packages().items():
        own = [node.module for node in tree.body if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith(package + ".")]
        assert not own or package in EAGER, (
            f"{package}/__init__.py imports {own} eagerly; list its names in _HOMES "
            "(lab.lazy) or add it to EAGER with the reason")


def test_lazy_names_are_not_module_names():
    # The import system binds a submodule on its package when it is first imported: a lazy
    # name equal to a module's name would be that module once anything imported it.
    for package, tree in _packages().items():
        homes = _homes(tree)
        if homes is None:
            continue
        folder = ROOT.joinpath(*package.split("."))
        modules = {p.stem for p in folder.glob("*.py")} | {
            p.parent.name for p in folder.glob("*/__init__.py")}
        assert not set(homes) & modules, f"{package} exports module names {set(homes) & modules}"


def test_importing_packages_imports_no_module():
    # A fresh process: this one has imported lab's modules already.
    packages = [p for p in _packages() if p not in EAGER and p != "lab.parallel"]
    code = (f"import sys\nimport {', '.join(packages)}\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('lab', 'jax', "
            "'papermill', 'optuna')))))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=60).stdout.split()
    assert "lab.models" in loaded
    assert sorted(loaded) == sorted([*packages, "lab.lazy"]), \
        f"importing {packages} also imported {sorted(set(loaded) - set(packages))}"
