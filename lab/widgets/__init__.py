"""ipywidgets panels for interactive training (controls, live plots, viewers).

``Panel`` runs a training function in a background thread with Run / Pause / Stop, a
progress bar and a throttled live figure; ``Controls`` are generated from ``Control`` specs
(type and valid range per parameter). The model families' panels import JAX and their
experiments, so import them from their modules: ``lab.widgets.proxprop_panel``,
``lab.widgets.vsml_panel``, ``lab.widgets.sac_ae_panel``,
``lab.widgets.policy_improvement_panel``; ``lab.widgets.compare.CompareView`` overlays
finished runs.
"""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "Control": ".controls",
    "Controls": ".controls",
    "Panel": ".panel",
    "is_headless": ".panel",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
