"""Runs: execute notebooks with papermill, record metrics and provenance, write HTML reports.

The machinery below the papers' experiments (``lab.experiments``) and the sweeps
(``lab.sweeps``): parameters and presets (``params``), the runner (``runner``), what a run
depends on (``inputs``) and where it came from (``provenance``), the metrics a notebook
records (``records``), declared claims (``claims``), the reports and the claims dashboard
(``report``, ``templates/``), runs made elsewhere (``imports``) and the benchmarks' timing
helpers (``benchmarking``). ``python -m lab`` is ``lab.cli``.

The public names below are imported from their modules on first use: a notebook's kernel
that only calls ``record`` does not import papermill, nbformat and nbconvert (about 2 s
of every kernel's start, most of it a grammar that jsonschema's URI checks build)."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it
    "ParameterError": ".params",
    "RunResult": ".runner",
    "RunnerError": ".runner",
    "build_index": ".report",
    "export_html": ".report",
    "import_runs": ".imports",
    "notebook_parameters": ".params",
    "record": ".records",
    "resolve": ".params",
    "run_all": ".runner",
    "run_dir": ".records",
    "run_notebook": ".runner",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
