"""Experiments: run notebooks with papermill, record metrics, write HTML reports.

The public names below are imported from their modules on first use: a notebook's kernel
that only calls ``record`` does not import papermill, nbformat and nbconvert (about 2 s
of every kernel's start, most of it a grammar that jsonschema's URI checks build)."""

from lab.lazy import exports

_HOMES = {  # public name -> the module of lab.experiments that defines it
    "ParameterError": ".params",
    "RunResult": ".runner",
    "RunnerError": ".runner",
    "build_index": ".report",
    "export_html": ".report",
    "import_runs": ".imports",
    "notebook_parameters": ".params",
    "record": ".records",
    "report_phase": ".phases",
    "resolve": ".params",
    "run_all": ".runner",
    "run_dir": ".records",
    "run_notebook": ".runner",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
