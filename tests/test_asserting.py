"""Every test asserts something: a test function with no ``assert``, no ``pytest.raises`` (or
``warns``, ``fail``), no ``assert_*`` call (``np.testing.assert_allclose``) and no call of a
helper that does one of these cannot fail on a wrong result, so it may not land. Source is
read, never run."""

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.conftest import ROOT

TESTS = ROOT / "tests"
RAISING = {"raises", "warns", "fail", "deprecated_call"}  # pytest.raises(...) and the like


def _name(call: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)``, ``assert_allclose`` for ``np.testing.x(...)``."""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _functions(trees: Iterable[ast.Module]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def _asserts_directly(fn, helpers: set[str]) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _name(node)
            if name.startswith("assert") or name in RAISING or name in helpers:
                return True
    return False


def asserting_helpers(trees: list[ast.Module]) -> set[str]:
    """Names of the functions that assert, directly or through another such function (a
    fixed point over every function in ``trees``; names are matched without their module,
    which can only let a test through, never fail one)."""
    functions, helpers = _functions(trees), set()
    while True:
        found = {fn.name for fn in functions if _asserts_directly(fn, helpers)}
        if found <= helpers:
            return helpers
        helpers |= found


def unasserted(trees: dict[str, ast.Module]) -> list[str]:
    """``file::test`` for each test function (``test*`` at module level or in a ``Test*``
    class) that asserts nothing, directly or through a helper."""
    helpers = asserting_helpers(list(trees.values()))
    out = []
    for path, tree in trees.items():
        candidates = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)
                    and n.name.startswith("Test")):
            candidates += [n for n in cls.body if isinstance(n, ast.FunctionDef)]
        out += [f"{path}::{fn.name}" for fn in candidates
                if fn.name.startswith("test") and not _asserts_directly(fn, helpers)]
    return out


def _trees(paths: Iterable[Path]) -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in paths}


def test_every_test_in_the_suite_asserts_something():
    assert unasserted(_trees(sorted(TESTS.glob("*.py")))) == []


PLANTED = '''
import numpy as np
import pytest

def check(x):
    assert x > 0

def indirect(x):
    check(x)

def test_asserts():
    assert 1 + 1 == 2

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_numpy():
    np.testing.assert_allclose(1.0, 1.0)

def test_through_two_helpers():
    indirect(3)

def test_only_prints():
    print(sum(range(10)))

class TestGroup:
    def test_in_a_class_without_one(self):
        int("3")
'''


def test_the_check_finds_a_planted_test_without_an_assertion():
    found = unasserted({"test_planted.py": ast.parse(PLANTED)})
    assert found == ["test_planted.py::test_only_prints",
                     "test_planted.py::test_in_a_class_without_one"]
