"""ipywidgets panels for interactive training (controls, live plots, viewers).

``Panel`` runs a training function in a background thread with Run / Pause / Stop, a
progress bar and a throttled live figure; ``Controls`` are generated from ``Control`` specs
(type and valid range per parameter). ``lab.widgets.policy_improvement_panel`` is the panel
of the MPO / V-MPO / search family; import it from there (it imports JAX and the agents).
"""

from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel, is_headless

__all__ = ["Control", "Controls", "Panel", "is_headless"]
