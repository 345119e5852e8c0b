"""Controls generated from an experiment's parameters: one ipywidgets control per parameter,
with its valid range and type, and an error label beside it.

A ``Control`` describes one parameter: its type, and a range (``low``, ``high``, optionally
on a log scale) or a list of ``options``. ``make_controls(specs, values)`` builds the widgets
at the given values (the notebook's parameters); ``Controls.values()`` reads them back and
``Controls.check()`` returns the per-parameter errors (empty when every value is valid).
"""

import dataclasses
import html
import math
import re
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets


@dataclasses.dataclass(frozen=True)
class Control:
    """One parameter's control."""

    name: str
    kind: type
    """``int``, ``float``, ``bool`` or ``str``."""
    low: float | None = None
    high: float | None = None
    log: bool = False
    """A log-scale slider (``low`` and ``high`` > 0)."""
    options: tuple | None = None
    """The allowed values (a dropdown) instead of a range."""
    description: str = ""

    def error(self, value: Any) -> str | None:
        """Why ``value`` is not valid for this parameter, or None."""
        if self.kind is bool:
            return None if isinstance(value, bool) else f"{self.name} must be True or False"
        if self.options is not None:
            return None if value in self.options else (
                f"{self.name} must be one of {', '.join(map(str, self.options))}")
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, int | float) or (
                    self.kind is int and not float(value).is_integer()):
                return f"{self.name} must be {'an integer' if self.kind is int else 'a number'}"
            if not math.isfinite(value):
                return f"{self.name} must be finite"
            if self.low is not None and value < self.low:
                return f"{self.name} must be at least {self.low:g}"
            if self.high is not None and value > self.high:
                return f"{self.name} must be at most {self.high:g}"
        return None

    def widget(self, value: Any) -> widgets.Widget:
        """The ipywidgets control at ``value`` (which must be valid: a slider would clamp)."""
        if (message := self.error(value)) is not None:
            raise ValueError(f"the control's starting value is invalid: {message}")
        label = self.description or self.name
        style = {"description_width": "initial"}
        if self.options is not None:
            return widgets.Dropdown(options=list(self.options), value=value, description=label,
                                    style=style)
        if self.kind is bool:
            return widgets.Checkbox(value=bool(value), description=label, style=style)
        if self.kind is int and self.low is not None and self.high is not None:
            return widgets.IntSlider(value=value, min=self.low, max=self.high,
                                     description=label, style=style, continuous_update=False)
        if self.kind is float and self.log:
            return widgets.FloatLogSlider(value=value, min=math.log10(self.low),
                                          max=math.log10(self.high), description=label,
                                          style=style, continuous_update=False)
        if self.kind is float and self.low is not None and self.high is not None:
            return widgets.FloatSlider(value=value, min=self.low, max=self.high,
                                       description=label, style=style,
                                       continuous_update=False)
        if self.kind is int:
            return widgets.IntText(value=value, description=label, style=style)
        if self.kind is float:
            return widgets.FloatText(value=value, description=label, style=style)
        return widgets.Text(value=str(value), description=label, style=style)


class Controls:
    """The widgets of several controls, each with an error label beside it."""

    def __init__(self, specs: Sequence[Control], values: dict[str, Any]):
        missing = [c.name for c in specs if c.name not in values]
        if missing:
            raise ValueError(f"no value for the controls {', '.join(missing)}")
        self.specs = {c.name: c for c in specs}
        self.widgets = {c.name: c.widget(values[c.name]) for c in specs}
        self.errors = {c.name: widgets.HTML("") for c in specs}
        self.box = widgets.VBox([widgets.HBox([self.widgets[n], self.errors[n]])
                                 for n in self.specs])

    def values(self) -> dict[str, Any]:
        return {name: w.value for name, w in self.widgets.items()}

    def set_values(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            self.widgets[name].value = value

    def check(self) -> dict[str, str]:
        """Show each invalid value's error beside its control; return them by name."""
        found = {}
        for name, spec in self.specs.items():
            message = spec.error(self.widgets[name].value)
            self.errors[name].value = (
                f"<span style='color:#b00020'>{html.escape(message)}</span>" if message else "")
            if message:
                found[name] = message
        return found

    def show_error(self, message: str) -> str | None:
        """Put an error from the experiment's own validation beside the control it names
        (the control whose name comes first in it, as a whole word); return that name, or
        None when it names none."""
        found = [(m.start(), name) for name in self.specs
                 if (m := re.search(rf"\b{re.escape(name)}\b", message))]
        if not found:
            return None
        name = min(found)[1]
        self.errors[name].value = f"<span style='color:#b00020'>{html.escape(message)}</span>"
        return name

    def disable(self, disabled: bool) -> None:
        for w in self.widgets.values():
            w.disabled = disabled
