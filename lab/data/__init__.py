"""Datasets as numpy arrays: bundled tables, synthetic tasks and cached downloads."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "DATASETS": ".datasets",
    "DataError": ".download",
    "FixedTaskSource": ".tasks",
    "TaskSource": ".tasks",
    "data_dir": ".download",
    "is_cached": ".datasets",
    "load": ".datasets",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
