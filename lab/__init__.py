"""lab: a Jupyter-first research workbench of Equinox models on JAX.

Subpackages: ``lab.data`` (datasets), ``lab.models``, ``lab.train`` (training loops),
``lab.experiments`` (runner, records, reports), ``lab.widgets`` (ipywidgets panels).
Importing ``lab`` does no work: import the subpackage you need.
"""

__version__ = "0.1.0"
