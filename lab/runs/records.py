"""What a notebook writes into its run directory: ``record(...)`` for metrics.

The runner sets ``LAB_RUN_DIR`` for the kernel it starts; a notebook calls
``lab.experiments.record(test_accuracy=0.97, ...)`` and the values are merged into
``$LAB_RUN_DIR/metrics.json``. Outside the runner (JupyterLab, plain papermill) there is
no run directory, and ``record`` only returns the values, so the same notebook works in
all three settings.
"""

import json
import os
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
    if isinstance(value, list | tuple):
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
