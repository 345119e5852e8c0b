"""Experiments: run notebooks with papermill, record metrics, write HTML reports."""

from lab.experiments.params import ParameterError, notebook_parameters, resolve
from lab.experiments.phases import report_phase
from lab.experiments.records import record, run_dir
from lab.experiments.report import build_index, export_html
from lab.experiments.runner import RunnerError, RunResult, run_all, run_notebook

__all__ = [
    "ParameterError",
    "RunResult",
    "RunnerError",
    "build_index",
    "export_html",
    "notebook_parameters",
    "record",
    "report_phase",
    "resolve",
    "run_all",
    "run_dir",
    "run_notebook",
]
