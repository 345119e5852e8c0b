"""Notebook parameters: read the ``parameters`` cell, apply a preset, check values against it.

**One precedence rule**: notebook default < preset < explicit value. Papermill infers each
parameter's name, default and type from the cell tagged ``parameters``; an experiment module
declares its presets as data (``PRESETS``, found through the notebook's metadata
``{"lab": {"validate": "module:function"}}``: the module's ``PRESETS``). Before any kernel
starts, :func:`resolve` gives the effective value of every parameter and where it came from
(``default``, ``preset NAME``, ``explicit``). Explicit values (``-p``, ``-r``, ``-f``,
``-y``) arrive as strings or YAML values; they are converted to the type of the default
here, so a typo or a wrong type costs nothing and writes nothing. The notebook's validator
(the named function, the one the notebook itself calls to turn its parameters into a
configuration) is called with the effective values, so a bad value (a negative step size,
an unknown solver) is refused before any kernel starts as well.

The runner injects the effective values and a call of :func:`resolved` into the notebook;
the experiment's ``configure`` then calls :func:`with_preset`, which leaves values the
runner resolved as they are. Without the runner (plain papermill, JupyterLab) the kernel
cannot tell a value you typed from the cell's default, so there :func:`with_preset` puts the
preset's values over the cell's for every name the preset sets, and prints each value it
replaced: to change a preset's value, use ``python -m lab run`` (or its ``--prepare-only``
notebook, which carries the resolved values).
"""

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

# nbformat and papermill are imported where a notebook is read, not here: every experiment
# module imports ``with_preset``, so every kernel would import them, and nbformat's schema
# validation imports jsonschema's format checkers (1.7 s on this machine, measured
# 2026-11-24, most of it rfc3987-syntax building its IRI parsers)

DEFAULT, EXPLICIT = "default", "explicit"  # sources of a value; a preset's is "preset NAME"


class ParameterError(ValueError):
    """A value does not fit the notebook's parameters cell or its presets."""


_resolved: dict[str, Any] | None = None  # the effective values the runner injected


def resolved(values: dict[str, Any] | None) -> None:
    """Declare ``values`` already resolved (default < preset < explicit): the runner's
    injected cell calls this, so that :func:`with_preset` does not put a preset over them
    again. ``None`` forgets them."""
    global _resolved
    _resolved = None if values is None else dict(values)


def _is_resolved(params: dict[str, Any]) -> bool:
    """Whether ``params`` are the ones the runner resolved: every resolved name present
    with its resolved value (another experiment's ``configure`` called in the same kernel
    has other names, and gets its preset as usual)."""
    return (_resolved is not None and set(_resolved) <= set(params)
            and all(params[k] == v for k, v in _resolved.items()))


def with_preset(params: dict[str, Any], presets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``params`` with its named preset applied (``params["preset"]``, "default" when
    absent): what every experiment's ``configure`` starts from. Values the runner resolved
    (:func:`resolved`) are returned as they are; otherwise the preset's values go over the
    given ones, and each replaced value is printed. An unknown preset is a one-line
    ValueError naming the choices."""
    preset = params.get("preset", "default")
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(presets)}")
    if _is_resolved(params):
        return dict(params)
    replaced = [f"{k}={v!r} (was {params[k]!r})" for k, v in presets[preset].items()
                if k in params and params[k] != v and params[k] is not None]
    if replaced:
        print(f"preset {preset!r} set " + ", ".join(replaced) + "; a value that beats a "
              "preset needs `python -m lab run -p NAME VALUE`")
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
            default = info["default"]  # an expression: treat explicit values as strings
        found[name] = Parameter(name, default, info.get("help", ""))
    return found


def _metadata(path: Path) -> dict[str, Any]:
    import nbformat

    return nbformat.read(path, as_version=4).metadata.get("lab", {})


def _validator_module(path: Path):
    target = _metadata(path).get("validate")
    if not target:
        return None, None
    module, _, name = target.partition(":")
    module = importlib.import_module(module)
    return module, getattr(module, name)


def notebook_presets(path: str | Path) -> dict[str, dict[str, Any]]:
    """The presets a notebook offers: its validator module's ``PRESETS`` (``{}`` when the
    notebook names no validator or its module has none)."""
    module, _ = _validator_module(Path(path))
    return dict(getattr(module, "PRESETS", {}) or {})


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


def _convert(param: Parameter, value: Any, *, raw: bool = False) -> Any:
    """``value`` as the type of the parameter's default; ``raw``: a string from ``-r``,
    taken as it is (papermill's convention), so only a str or None default accepts it."""
    expected = type(param.default)
    wrong = ParameterError(f"parameter {param.name!r} expects {param.type_name}, got {value!r}"
                           + (" (-r passes a raw string; use -p)" if raw else ""))
    if isinstance(value, str) and expected is not str and not raw:
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


class Resolution(NamedTuple):
    """Every parameter's effective value and where it came from."""

    values: dict[str, Any]  # name -> effective value, in the order of the parameters cell
    explicit: dict[str, Any]  # the values given (-p, -r, -f, -y), converted
    sources: dict[str, str]  # name -> "default" | "preset NAME" | "explicit"
    defaults: dict[str, Any]  # the notebook's own values

    @property
    def preset(self) -> str:
        return str(self.values.get("preset", "default"))

    @property
    def injected(self) -> dict[str, Any]:
        """What the runner puts into the notebook: every value not from its defaults."""
        return {k: v for k, v in self.values.items() if self.sources[k] != DEFAULT}

    @property
    def marker(self) -> dict[str, Any]:
        """What :func:`resolved` is given: the injected values and the preset's name."""
        return self.injected | ({"preset": self.preset} if "preset" in self.values else {})


def effective(defaults: dict[str, Any], presets: dict[str, dict[str, Any]],
              explicit: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The precedence rule, notebook default < preset < explicit value: the effective
    values and each one's source. The preset is ``explicit["preset"]``, else the
    notebook's ``preset``; an unknown one is a :class:`ParameterError`."""
    values, sources = dict(defaults), dict.fromkeys(defaults, DEFAULT)
    preset = explicit.get("preset", defaults.get("preset", "default"))
    if presets and preset not in presets:
        raise ParameterError(f"unknown preset {preset!r}; choose one of {', '.join(presets)}")
    for name, value in (presets.get(preset) or {}).items():
        if name not in defaults:
            raise ParameterError(f"preset {preset!r} sets {name!r}, which is not a notebook "
                                 "parameter; declare it in the parameters cell")
        values[name], sources[name] = value, f"preset {preset}"
    for name, value in explicit.items():
        values[name], sources[name] = value, EXPLICIT
    return values, sources


def resolve(path: str | Path, explicit: dict[str, Any], *,
            raw: dict[str, str] | None = None) -> Resolution:
    """Check the explicit values against the notebook, apply its preset, validate; see the
    module doc. ``explicit`` values may be strings (converted to the default's type) or
    Python values; ``raw`` ones (``-r``) are taken as strings. Raises
    :class:`ParameterError` with a one-line message."""
    path = Path(path)
    declared = notebook_parameters(path)
    given = {**explicit, **(raw or {})}
    if not declared:
        if given:
            raise ParameterError(
                f"{path.name} has no cell tagged 'parameters'; tag one to accept -p values")
        return Resolution({}, {}, {}, {})
    converted = {}
    for name, value in given.items():
        if name not in declared:
            raise ParameterError(
                f"unknown parameter {name!r} for {path.name}; valid names: {', '.join(declared)}")
        converted[name] = _convert(declared[name], value, raw=name in (raw or {}))
    defaults = {name: p.default for name, p in declared.items()}
    module, validator = _validator_module(path)
    try:
        values, sources = effective(defaults, dict(getattr(module, "PRESETS", {}) or {}),
                                    converted)
    except ParameterError as err:
        raise ParameterError(f"{path.name}: {err}") from None
    resolution = Resolution(values, converted, sources, defaults)
    if validator is not None:
        resolved(resolution.marker)  # as the kernel will have them: no preset on top again
        try:
            validator(**values)
        except (ValueError, TypeError) as err:
            raise ParameterError(f"{path.name}: {err}") from None
        finally:
            resolved(None)
    return resolution
