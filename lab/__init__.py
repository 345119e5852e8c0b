"""lab: a Jupyter-first research workbench of Equinox models on JAX.

Subpackages, lowest first (none imports a higher one; ``tests/test_layering.py``): ``lab.data``
and ``lab.envs``, ``lab.models`` (and ``lab.optim``, ``lab.rl``, ``lab.causal``),
``lab.parallel``, ``lab.train`` (training loops), ``lab.runs`` (runner, records, reports),
``lab.sweeps``, ``lab.experiments`` (each paper's studies), ``lab.widgets`` (ipywidgets
panels); ``lab.cli`` is ``python -m lab``. ``lab.compile_watch`` (below them all) says
whether JAX compiled inside a timed region.
Importing ``lab`` does no work: import the subpackage you need.
"""

__version__ = "0.1.0"
