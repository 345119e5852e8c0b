"""Lazy re-exports for a package's ``__init__`` (PEP 562).

A package lists each public name with the module that defines it; the name is imported from
there on first use, so ``import lab.models`` does not import every model, and a notebook's
kernel that only calls ``lab.experiments.record`` does not import the runner::

    from lab.lazy import exports

    _HOMES = {"mlp": ".feedforward", "MetaRNN": ".meta_rnn"}  # name -> its module
    __all__ = sorted(_HOMES)
    __getattr__, __dir__ = exports(__name__, _HOMES)

A home is relative to the package (``.feedforward``) or absolute (``lab.runs.records``);
``".minatar:GAMES"`` exports that module's ``GAMES`` under another name.
A name must not be the name of one of the package's own submodules: the import system binds a
submodule on its package when the submodule is first imported, and the module would then
stand where the name was (such a package re-exports eagerly; ``tests/test_layering.py``
checks this).

``skip_iri_grammar`` is the other import cost kept out of the way: jsonschema's IRI grammar,
in the processes that run notebooks.
"""

import importlib
import sys
from collections.abc import Callable


def exports(package: str, homes: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names ``homes`` maps to the
    modules that define them."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = homes[name].partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__


def skip_iri_grammar() -> None:
    """Keep jsonschema (imported by nbformat and papermill) from building about 35 Earley
    parsers at import, which it does when the optional rfc3987-syntax is installed, to check
    the "iri" format that no notebook schema uses: 1.5-2 s of every process that runs
    notebooks (python-jsonschema/jsonschema issue 1428). Without it jsonschema leaves that
    one format unchecked. Called by ``python -m lab`` and the batch's worker processes,
    before they import nbformat; never in a kernel or a user's own process."""
    sys.modules.setdefault("rfc3987_syntax", None)
