"""ipywidgets panels for interactive training (controls, live plots, viewers)."""

__all__: list[str] = []
