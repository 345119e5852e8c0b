"""The package map as code: package ``__init__``s re-export lazily (``lab.lazy``), so importing
a package imports none of its modules."""

import ast
import subprocess
import sys

from tests.conftest import ROOT

LAB = ROOT / "lab"

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
