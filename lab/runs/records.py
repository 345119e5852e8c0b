"""What a notebook writes into its run directory: ``record(...)`` for metrics.

The runner sets ``LAB_RUN_DIR`` for the kernel it starts; a notebook calls
``lab.experiments.record(test_accuracy=0.97, ...)`` and the values are merged into
``$LAB_RUN_DIR/metrics.json``. Outside the runner (JupyterLab, plain papermill) there is
no run directory, and ``record`` only returns the values, so the same notebook works in
all three settings.
"""

import json
import os
import warnings
from numbers import Number
from pathlib import Path
from typing import Any

import numpy as np

RUN_DIR_ENV = "LAB_RUN_DIR"
METRICS_FILE = "metrics.json"


def run_dir() -> Path | None:
    """The run directory the runner gave this process, or None outside the runner."""
    value = os.environ.get(RUN_DIR_ENV)
    return Path(value) if value else None


def _plain(value: Any) -> Any:
    """A JSON-ready copy: arrays and numpy/jax scalars become lists and numbers."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | range):
        return [_plain(v) for v in value]
    if isinstance(value, str | bool) or value is None:
        return value
    if hasattr(value, "__array__"):
        value = np.asarray(value)
        return value.item() if value.ndim == 0 else value.tolist()
    if isinstance(value, Number):
        return value if isinstance(value, int) else float(value)
    raise TypeError(f"record() cannot store {type(value).__name__}; pass numbers, strings or lists")


def read_metrics(folder: Path) -> dict[str, Any]:
    path = Path(folder) / METRICS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def record(**metrics: Any) -> dict[str, Any]:
    """Store headline metrics of this run; returns everything recorded so far."""
    values = {name: _plain(value) for name, value in metrics.items()}
    folder = run_dir()
    if folder is None:
        return values
    merged = read_metrics(folder) | values
    tmp = folder / f".{METRICS_FILE}.tmp"
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=True))
    tmp.replace(folder / METRICS_FILE)
    return merged


SPREADS = {"range": "min-max", "quartiles": "interquartile range"}


def spread_curve(x: Any, rows: Any, *, unit: str = "seeds", centre: str = "mean",
                 spread: str = "range", **fields: Any) -> dict[str, Any]:
    """A curve for ``record(curves=...)`` from per-unit numbers ``rows`` (units x points: one
    row per seed, trial or arrival order): ``y`` their mean (or median) and, with two or more
    units, ``low``/``high`` their spread, min-max (``"range"``) or the quartiles; ``band``
    says what the line and the band are in the words of ``lab.widgets.bands`` ("mean of 3
    seeds, band min-max"; "one seed, no band"), and the compare view puts it in its legend;
    ``n`` is the number of units. NaN (no unit has a value there) is stored as None.
    ``fields``: ``xlabel``, ``ylabel``, ``xscale``, ...."""
    if centre not in ("mean", "median") or spread not in SPREADS:
        raise ValueError(f"centre must be mean or median and spread one of {sorted(SPREADS)}; "
                         f"got {centre!r}, {spread!r}")
    a = np.atleast_2d(np.asarray(rows, float))
    n = int(a.shape[0])
    with warnings.catch_warnings():  # a point no unit reached: NaN, stored as None
        warnings.simplefilter("ignore", RuntimeWarning)
        y = np.nanmean(a, 0) if centre == "mean" else np.nanmedian(a, 0)
        low, high = ((np.nanmin(a, 0), np.nanmax(a, 0)) if spread == "range"
                     else tuple(np.nanquantile(a, [0.25, 0.75], axis=0)))
    out = {"x": _plain(x), "y": _nullable(y), "n": n, **fields}
    if n == 1:
        return out | {"band": f"one {unit[:-1] if unit.endswith('s') else unit}, no band"}
    return out | {"low": _nullable(low), "high": _nullable(high),
                  "band": f"{centre} of {n} {unit}, band {SPREADS[spread]}"}


def _nullable(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, float)]
