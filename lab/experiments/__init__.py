"""Experiments: each paper's studies, presets and claims, one module per notebook.

The machinery that runs notebooks is ``lab.runs``. A notebook imports the four names it
calls from here, each from its module on first use (a kernel that only calls ``record`` does
not import the runner): ``record``, ``run_dir`` and ``spread_curve`` (``lab.runs.records``),
``report_phase`` (``lab.sweeps.phases``)."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it
    "record": "lab.runs.records",
    "report_phase": "lab.sweeps.phases",
    "run_dir": "lab.runs.records",
    "spread_curve": "lab.runs.records",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
