"""A live training panel: controls, Run / Pause / Stop, a progress bar and a live figure.

The panel runs ``train(values, report)`` in a background thread, so the kernel stays free.
``train`` builds and trains from the controls' values and calls ``report(fraction, data)``
every logging interval (``fraction`` of the run done, ``data`` whatever ``draw`` plots); the
call blocks while the panel is paused and returns ``False`` once Stop was pressed, and
``train`` then stops and returns what it has. Its return value is ``panel.result``, available
in the notebook afterwards.

The figure is drawn with ``draw(figure, data)`` on a matplotlib ``Figure`` (no pyplot, so no
GUI and no thread trouble) and shown as a PNG in an ``ipywidgets.Image``, at most once per
``min_interval`` seconds, so a fast run never floods the front end (or papermill's IOPub).

Invalid values are refused before anything starts: each control's own range and type, then
``validate(values)`` (an experiment's ``configure``), whose ``ValueError`` is shown beside the
control it names. Headless (under papermill or the runner), ``show()`` renders the final
figure as an image and the values as a table, which is what an HTML report can hold.

The figure is never blank: a panel opens on the notebook's own result where it is given one
(``set_result``), and otherwise on empty axes labelled ``labels`` (``empty_png``).
"""

import html
import io
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from matplotlib.figure import Figure

from lab.widgets.controls import Controls

STATES = ("idle", "running", "paused", "stopped", "done", "failed")


def figure_png(figure: Figure, dpi: int = 80) -> bytes:
    """A matplotlib figure as PNG bytes (for an ``ipywidgets.Image``)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def empty_png(figsize: tuple[float, float], title: str, xlabel: str = "",
              ylabel: str = "") -> bytes:
    """Empty axes with a title and axis labels as PNG bytes: what an image widget shows
    before there is anything to draw (an ``ipywidgets.Image`` without a value shows the
    browser's broken-image icon)."""
    figure = Figure(figsize=figsize)
    figure.add_subplot().set(title=title, xlabel=xlabel, ylabel=ylabel, xticks=[], yticks=[])
    figure.tight_layout()
    return figure_png(figure)


def is_headless() -> bool:
    """True under the ``lab`` runner and under papermill (no live front end): JupyterLab's
    server names the kernel's session in ``JPY_SESSION_NAME``; batch runs do not."""
    from lab.runs.records import run_dir

    return run_dir() is not None or "JPY_SESSION_NAME" not in os.environ


class Panel:
    """Controls, buttons, progress and a live figure around one training function."""

    def __init__(self, title: str, controls: Controls,
                 train: Callable[[dict, Callable[[float, Any], bool]], Any],
                 draw: Callable[[Figure, Any], None], *,
                 validate: Callable[[dict], Any] | None = None, min_interval: float = 0.5,
                 figsize: tuple[float, float] = (9.0, 3.5), labels: tuple[str, str] = ("", "")):
        self.title, self.controls = title, controls
        self._train, self._draw, self._validate = train, draw, validate
        self.min_interval, self.figsize = min_interval, figsize
        self.state = "idle"
        self.result: Any = None
        self.data: Any = None
        self.fraction = 0.0
        self.draws = 0
        """How many times the figure was redrawn (tests and the browser test read it)."""
        self.error: str | None = None
        self._resume = threading.Event()
        self._resume.set()
        self.held = threading.Event()
        """Set while ``train`` is held in ``report`` by Pause: from then on it makes no
        progress until Resume or Stop (tests and front ends wait on this, not on a clock)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0

        self.run_button = widgets.Button(description="Run", button_style="success",
                                         icon="play")
        self.pause_button = widgets.Button(description="Pause", icon="pause", disabled=True)
        self.stop_button = widgets.Button(description="Stop", button_style="danger",
                                          icon="stop", disabled=True)
        self.run_button.on_click(lambda _: self.run())
        self.pause_button.on_click(lambda _: self.resume() if self.state == "paused"
                                   else self.pause())
        self.stop_button.on_click(lambda _: self.stop())
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0,
                                              description="progress")
        self.status = widgets.HTML(self._status_html())
        self.image = widgets.Image(value=empty_png(figsize, "press Run", *labels), format="png")
        """Empty axes labelled ``labels`` (x, y) until a result is shown or a run draws."""
        self.widget = widgets.VBox([
            widgets.HTML(f"<b>{html.escape(title)}</b>"), controls.box,
            widgets.HBox([self.run_button, self.pause_button, self.stop_button]),
            widgets.HBox([self.progress, self.status]), self.image])

    # --- buttons ---------------------------------------------------------------------------
    def run(self) -> bool:
        """Start a run with the controls' values, unless one is running or a value is
        invalid (then the errors show beside the controls). Returns whether it started."""
        if self.state in ("running", "paused"):
            return False
        values = self.controls.values()
        if self.controls.check():
            self._set_state("idle", "fix the values marked in red")
            return False
        if self._validate is not None:
            try:
                self._validate(values)
            except ValueError as e:
                if self.controls.show_error(str(e)) is None:
                    self._set_state("idle", str(e))
                else:
                    self._set_state("idle", "fix the values marked in red")
                return False
        self._stop.clear()
        self._resume.set()
        self.fraction, self.error, self.result = 0.0, None, None
        self.progress.value = 0.0
        self.controls.disable(True)
        self._set_state("running")
        self._thread = threading.Thread(target=self._work, args=(values,), daemon=True)
        self._thread.start()
        return True

    def pause(self) -> None:
        if self.state == "running":
            self._resume.clear()
            self._set_state("paused")

    def resume(self) -> None:
        if self.state == "paused":
            self._set_state("running")
            self._resume.set()

    def stop(self) -> None:
        """Ask the run to stop; it does at its next ``report`` (one logging interval)."""
        if self.state in ("running", "paused"):
            self._stop.set()
            self._resume.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run's thread ends; True if it has."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    # --- the worker thread -------------------------------------------------------------------
    def report(self, fraction: float, data: Any) -> bool:
        """Called by ``train``: record progress, redraw (throttled), honour Pause and Stop.
        Returns False when the run should stop."""
        self.fraction, self.data = float(fraction), data
        self.progress.value = min(max(self.fraction, 0.0), 1.0)
        now = time.monotonic()
        if now - self._last_draw >= self.min_interval:
            self.redraw()
        if not self._resume.is_set():  # paused: hold here until Resume or Stop
            self.held.set()
            self._resume.wait()
            self.held.clear()
        return not self._stop.is_set()

    def _work(self, values: dict) -> None:
        try:
            self.result = self._train(values, self.report)
            final = "stopped" if self._stop.is_set() else "done"
            if final == "done":
                self.progress.value = 1.0
            self.redraw()
            self._set_state(final)
        except Exception as e:  # shown in the panel; the kernel goes on
            self.error = f"{type(e).__name__}: {e}"
            self._set_state("failed", self.error)
        finally:
            self.controls.disable(False)

    # --- display -----------------------------------------------------------------------------
    def figure(self) -> Figure:
        figure = Figure(figsize=self.figsize)
        if self.data is not None:
            self._draw(figure, self.data)
        return figure

    def png(self) -> bytes:
        return figure_png(self.figure())

    def redraw(self) -> None:
        self._last_draw = time.monotonic()
        if self.data is None:
            return
        self.image.value = self.png()
        self.draws += 1

    def set_result(self, data: Any, result: Any = None) -> None:
        """Show a finished run (e.g. the notebook's own) as the panel's current state."""
        self.data, self.result, self.fraction = data, result, 1.0
        self.progress.value = 1.0
        self.redraw()
        self._set_state("done")

    def _set_state(self, state: str, message: str = "") -> None:
        assert state in STATES
        self.state = state
        running = state in ("running", "paused")
        self.run_button.disabled = running
        self.pause_button.disabled = not running
        self.pause_button.description = "Resume" if state == "paused" else "Pause"
        self.stop_button.disabled = not running
        self.status.value = self._status_html(message)

    def _status_html(self, message: str = "") -> str:
        text = f"{self.state}, {100 * self.fraction:.0f}%"
        if message:
            text += f": <span style='color:#b00020'>{html.escape(message)}</span>"
        return f"<span>{text}</span>"

    def show(self, headless: bool | None = None):
        """The live widget, or (headless) the final figure and the values as static HTML."""
        from IPython.display import HTML, Image

        if not (is_headless() if headless is None else headless):
            return self.widget
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(repr(v))}</td></tr>"
                       for k, v in self.controls.values().items())
        from IPython.display import display

        display(HTML(f"<b>{html.escape(self.title)}</b> ({self.state}) <table>{rows}</table>"))
        return Image(self.png()) if self.data is not None else None
