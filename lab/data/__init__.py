"""Datasets as numpy arrays: bundled tables, synthetic tasks and cached downloads."""

from lab.data.datasets import DATASETS, is_cached, load
from lab.data.download import DataError, data_dir
from lab.data.tasks import FixedTaskSource, TaskSource

__all__ = ["DATASETS", "DataError", "FixedTaskSource", "TaskSource", "data_dir", "is_cached",
           "load"]
