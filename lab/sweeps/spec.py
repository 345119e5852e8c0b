"""A sweep's specification: which notebook, which parameters to sample, how to stop early.

A YAML file (or the same as a Python dict) such as::

    name: mpo-pendulum                       # the Optuna study's name
    notebook: notebooks/04_policy_improvement.ipynb
    fixed: {agent: mpo, compare: false, seeds: 1, total_steps: 4000}
    space:
      learning_rate: {type: loguniform, low: 1.0e-5, high: 1.0e-2}
      n_step: {type: qloguniform, low: 1, high: 20, q: 1}        # integers when q is one
      discount: {type: choice, values: [0.9, 0.95, 0.99, 0.995, 0.999]}
    metric: mpo_final_return                 # a value the notebook records
    direction: maximize
    phases: 4                                # Np: equal phases of each trial's training
    survival: 0.5                            # r: HyperTrick's survival rate per phase
    trials: 24
    workers: 4

``load_spec`` checks everything before anything runs (the notebook and its parameter
names, every range) and raises :class:`SpecError` with one line naming the bad field.
"""

import math
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.runs.params import ParameterError, notebook_parameters, resolve

KINDS = ("uniform", "loguniform", "qloguniform", "int", "choice")
SAMPLERS = ("random", "tpe")
PRUNERS = ("hypertrick", "none", "successive_halving", "hyperband", "median")
DIRECTIONS = ("maximize", "minimize")


class SpecError(ValueError):
    """The sweep specification is malformed; the message names the field."""


@dataclass(frozen=True)
class Dimension:
    """One sampled parameter.

    ``uniform`` and ``loguniform`` floats on [low, high]; ``qloguniform`` log-uniform on
    [low, high] rounded to a multiple of ``q`` (integers when ``q`` is an integer);
    ``int`` uniform integers on [low, high]; ``choice`` one of ``values``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    q: float | None = None
    values: tuple | None = None


@dataclass(frozen=True)
class SweepSpec:
    name: str
    notebook: str
    metric: str
    space: tuple[Dimension, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    direction: str = "maximize"
    phases: int = 4
    survival: float = 0.5
    trials: int = 16
    workers: int = 2
    sampler: str = "random"
    pruner: str = "hypertrick"
    seed: int = 0
    retries: int = 1
    """How often a trial whose worker died is run again."""
    timeout: int = 1800
    """Seconds one notebook cell may run."""

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain data (what ``load_spec`` reads back; stored with the study)."""
        data = asdict(self)
        data["space"] = {
            d.pop("name"): {"type": d.pop("kind")} | {
                k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()
                if v is not None} for d in data.pop("space")}
        return data


def _dimension(name: str, raw: Any) -> Dimension:
    where = f"space.{name}"
    if not isinstance(raw, dict) or "type" not in raw:
        raise SpecError(f"{where} must be a mapping with a type ({', '.join(KINDS)})")
    kind = raw["type"]
    if kind not in KINDS:
        raise SpecError(f"{where}.type {kind!r} is unknown; use one of {', '.join(KINDS)}")
    allowed = {"type", "values"} if kind == "choice" else {"type", "low", "high"} | (
        {"q"} if kind == "qloguniform" else set())
    if extra := set(raw) - allowed:
        raise SpecError(f"{where} has unknown field(s) {', '.join(sorted(extra))}; a {kind} "
                        f"takes {', '.join(sorted(allowed - {'type'}))}")
    if kind == "choice":
        values = raw.get("values")
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}.values must be a non-empty list")
        return Dimension(name, kind, values=tuple(values))
    for bound in ("low", "high"):
        if not isinstance(raw.get(bound), int | float) or isinstance(raw.get(bound), bool):
            raise SpecError(f"{where}.{bound} must be a number, got {raw.get(bound)!r}")
    low, high = raw["low"], raw["high"]
    if not low < high:
        raise SpecError(f"{where}: low ({low}) must be below high ({high})")
    if kind in ("loguniform", "qloguniform") and low <= 0:
        raise SpecError(f"{where}.low must be positive on a log scale, got {low}")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise SpecError(f"{where}: an int range needs integer low and high")
    q = raw.get("q", 1) if kind == "qloguniform" else None
    if q is not None and (not isinstance(q, int | float) or q <= 0 or q > high - low):
        raise SpecError(f"{where}.q must be positive and at most high - low, got {q!r}")
    if kind == "qloguniform" and float(q).is_integer() and not (
            float(low).is_integer() and float(high).is_integer()):
        raise SpecError(f"{where}: an integer q needs integer low and high")
    return Dimension(name, kind, low, high, q)


def _need(raw: dict, key: str, kind: type | tuple, check=None, message: str = "") -> Any:
    value = raw[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool or (
            check is not None and not check(value)):
        raise SpecError(f"{key} {message}, got {value!r}")
    return value


def load_spec(source: str | Path | dict[str, Any], *, root: str | Path | None = None,
              check_notebook: bool = True) -> SweepSpec:
    """A :class:`SweepSpec` from a YAML file or a dict, checked; ``root`` is the folder a
    relative notebook path is read from (the YAML file's project, or the working folder).
    ``check_notebook=False`` skips reading the notebook (its parameter names, and its
    validator on the space's extremes): for a spec already checked when its study was made."""
    if isinstance(source, dict):
        raw = dict(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"sweep spec {path} does not exist; pass a YAML file")
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise SpecError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{path} must hold a mapping of fields (name, notebook, space, ...)")
    names = {f for f in SweepSpec.__dataclass_fields__}
    if unknown := set(raw) - names:
        raise SpecError(f"unknown field(s) {', '.join(sorted(unknown))}; valid fields: "
                        f"{', '.join(sorted(names))}")
    if missing := [k for k in ("name", "notebook", "metric", "space") if k not in raw]:
        raise SpecError(f"missing field(s) {', '.join(missing)}")
    defaults = {k: f.default for k, f in SweepSpec.__dataclass_fields__.items()
                if f.default is not MISSING}
    raw = defaults | {"fixed": {}} | raw
    _need(raw, "name", str, lambda s: s and s.replace("-", "").replace("_", "").isalnum(),
          "must be letters, digits, - and _")
    _need(raw, "metric", str, bool, "must name a value the notebook records")
    _need(raw, "direction", str, DIRECTIONS.__contains__, f"must be one of {DIRECTIONS}")
    _need(raw, "phases", int, lambda n: n >= 1, "must be an integer of at least 1")
    _need(raw, "survival", int | float, lambda r: 0 < r <= 1, "must be in (0, 1]")
    _need(raw, "trials", int, lambda n: n >= 1, "must be an integer of at least 1")
    _need(raw, "workers", int, lambda n: n >= 1, "must be an integer of at least 1")
    _need(raw, "sampler", str, SAMPLERS.__contains__, f"must be one of {SAMPLERS}")
    _need(raw, "pruner", str, PRUNERS.__contains__, f"must be one of {PRUNERS}")
    _need(raw, "seed", int, None, "must be an integer")
    _need(raw, "retries", int, lambda n: n >= 0, "must be an integer of at least 0")
    _need(raw, "timeout", int, lambda n: n >= 1, "must be a positive number of seconds")
    _need(raw, "fixed", dict, None, "must be a mapping of parameter values")
    if not isinstance(raw["space"], dict) or not raw["space"]:
        raise SpecError("space must be a non-empty mapping of parameter: distribution")
    space = tuple(_dimension(name, value) for name, value in raw["space"].items())

    notebook = Path(raw["notebook"])
    if not notebook.is_absolute():
        notebook = Path(root or Path.cwd()) / notebook
    if not check_notebook:
        return SweepSpec(**raw | {"space": space, "notebook": str(notebook),
                                  "survival": float(raw["survival"])})
    if notebook.suffix != ".ipynb" or not notebook.is_file():
        raise SpecError(f"notebook {raw['notebook']} does not exist; give a .ipynb path")
    declared = notebook_parameters(notebook)
    for where, keys in (("fixed", raw["fixed"]), ("space", raw["space"])):
        if unknown := [k for k in keys if k not in declared]:
            raise SpecError(f"{where} names unknown parameter(s) {', '.join(unknown)} of "
                            f"{notebook.name}; valid names: {', '.join(declared)}")
    if both := set(raw["fixed"]) & set(raw["space"]):
        raise SpecError(f"{', '.join(sorted(both))} is both fixed and searched; keep one")
    spec = SweepSpec(**raw | {"space": space, "notebook": str(notebook),
                              "survival": float(raw["survival"])})
    for corner in (0, 1):  # the fixed values with the space's extremes must be valid
        try:
            resolve(notebook, spec.fixed | {d.name: extreme(d, corner) for d in space})
        except ParameterError as err:
            raise SpecError(f"fixed/space: {err}") from None
    return spec


def extreme(d: Dimension, corner: int) -> Any:
    """The lowest (corner 0) or highest (1) value a dimension can take."""
    if d.kind == "choice":
        return d.values[-corner]
    value = d.high if corner else d.low
    if d.kind == "int" or (d.kind == "qloguniform" and float(d.q).is_integer()):
        return int(value)
    return float(value)


def quantize(d: Dimension, value: float) -> Any:
    """A ``qloguniform`` draw rounded to a multiple of ``q`` inside [low, high]."""
    q = d.q
    rounded = min(max(round(value / q) * q, math.ceil(d.low / q) * q), math.floor(d.high / q) * q)
    return int(rounded) if float(q).is_integer() else float(rounded)
