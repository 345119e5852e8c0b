"""Notebook parameters: read the ``parameters`` cell, check overrides against it.

Papermill infers each parameter's name, default and type from the cell tagged
``parameters``. Overrides given on the command line arrive as strings; they are
converted to the type of the default here, before any kernel starts, so a typo or a
wrong type costs nothing and writes nothing. A notebook can also name a validator in
its metadata, ``{"lab": {"validate": "module:function"}}``: the function the notebook
itself calls to turn its parameters into a configuration. The runner calls it with every
parameter first, so a bad value (a negative step size, an unknown solver) is refused
before any kernel starts as well.
"""

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# nbformat and papermill are imported where a notebook is read, not here: every experiment
# module imports ``with_preset``, so every kernel would import them, and nbformat's schema
# validation imports jsonschema's format checkers (1.7 s on this machine, measured
# 2026-11-24, most of it rfc3987-syntax building its IRI parsers)


class ParameterError(ValueError):
    """An override does not fit the notebook's parameters cell."""


def with_preset(params: dict[str, Any], presets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``params`` with its named preset's values on top (``params["preset"]``, "default" when
    absent): what every experiment's ``configure`` starts from. An unknown preset is a
    one-line ValueError naming the choices."""
    preset = params.get("preset", "default")
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(presets)}")
    return params | presets[preset]


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    help: str

    @property
    def type_name(self) -> str:
        return type(self.default).__name__


def notebook_parameters(path: str | Path) -> dict[str, Parameter]:
    """The parameters a notebook declares, in the order of its parameters cell."""
    import papermill

    found = {}
    for name, info in papermill.inspect_notebook(str(path)).items():
        try:
            default = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            default = info["default"]  # an expression: treat overrides as strings
        found[name] = Parameter(name, default, info.get("help", ""))
    return found


def _parse(text: str, expected: type) -> Any:
    """A command-line string as a value of type ``expected`` (ValueError if it is not)."""
    text = text.strip()
    if expected is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(text)
        return text.lower() in ("true", "1")
    if expected in (int, float):
        return expected(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if expected is type(None):
            return text  # a None default takes any literal, or else the string
        raise ValueError(text) from None


def _convert(param: Parameter, value: Any) -> Any:
    expected = type(param.default)
    wrong = ParameterError(f"parameter {param.name!r} expects {param.type_name}, got {value!r}")
    if isinstance(value, str) and expected is not str:
        try:
            value = _parse(value, expected)
        except ValueError:
            raise wrong from None
    if param.default is None:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise wrong
    return value


def resolve(path: str | Path, overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check ``overrides`` against the notebook; return ``(all_parameters, overrides)``.

    Values may be strings from a command line (converted to the default's type) or
    Python values. Raises :class:`ParameterError` with a one-line message.
    """
    declared = notebook_parameters(path)
    if not declared:
        if overrides:
            raise ParameterError(
                f"{Path(path).name} has no cell tagged 'parameters'; tag one to accept -p values"
            )
        return {}, {}
    converted = {}
    for name, value in overrides.items():
        if name not in declared:
            raise ParameterError(
                f"unknown parameter {name!r} for {Path(path).name}; "
                f"valid names: {', '.join(declared)}"
            )
        converted[name] = _convert(declared[name], value)
    merged = {name: p.default for name, p in declared.items()} | converted
    _validate(Path(path), merged)
    return merged, converted


def _validate(path: Path, parameters: dict[str, Any]) -> None:
    import nbformat

    target = nbformat.read(path, as_version=4).metadata.get("lab", {}).get("validate")
    if not target:
        return
    module, _, name = target.partition(":")
    try:
        getattr(importlib.import_module(module), name)(**parameters)
    except (ValueError, TypeError) as err:
        raise ParameterError(f"{path.name}: {err}") from None
