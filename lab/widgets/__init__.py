"""ipywidgets panels for interactive training (controls, live plots, viewers).

``Panel`` runs a training function in a background thread with Run / Pause / Stop, a
progress bar and a throttled live figure; ``Controls`` are generated from ``Control`` specs
(type and valid range per parameter). The model families' panels import JAX and their
experiments, so import them from their modules: ``lab.widgets.proxprop_panel``,
``lab.widgets.vsml_panel``, ``lab.widgets.sac_ae_panel``,
``lab.widgets.policy_improvement_panel``; ``lab.widgets.compare.CompareView`` overlays
finished runs.
"""

from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel, is_headless

__all__ = ["Control", "Controls", "Panel", "is_headless"]
