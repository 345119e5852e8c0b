"""Panel logic with real ipywidgets objects: controls, Run / Pause / Stop, throttled redraws."""

import threading
import time

import ipywidgets as widgets
import numpy as np
import pytest
from IPython.display import Image

from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel
from tests.conftest import WAIT, wait_for

SPECS = [Control("steps", int, 1, 100), Control("lr", float, 1e-5, 1e-1, log=True),
         Control("agent", str, options=("a", "b")), Control("compare", bool)]
VALUES = {"steps": 10, "lr": 1e-3, "agent": "a", "compare": True}


def _draw(figure, data):
    figure.add_subplot().plot(data)


def _panel(train, **kw):
    return Panel("test", Controls(SPECS, VALUES), train, _draw, min_interval=0.0, **kw)


def test_control_errors_name_the_range_and_type():
    steps, lr, agent, compare = SPECS
    assert steps.error(0) == "steps must be at least 1"
    assert steps.error(2.5) == "steps must be an integer"
    assert lr.error(1.0) == "lr must be at most 0.1"
    assert agent.error("c") == "agent must be one of a, b"
    assert compare.error(1) == "compare must be True or False"
    assert steps.error(50) is None and lr.error(1e-3) is None


def test_controls_show_values_and_errors():
    controls = Controls(SPECS, VALUES)
    assert controls.values() == VALUES
    controls.widgets["steps"].value = 7
    assert controls.values()["steps"] == 7 and controls.check() == {}
    with pytest.raises(ValueError, match="no value for the controls steps"):
        Controls(SPECS, {"lr": 1e-3, "agent": "a", "compare": True})


def test_panel_refuses_invalid_values_before_starting():
    calls = []
    panel = _panel(lambda values, report: calls.append(values))
    panel.controls.widgets["steps"] = type("W", (), {"value": 0, "disabled": False})()
    assert panel.run() is False
    assert calls == [] and panel.state == "idle"
    assert "steps must be at least 1" in panel.controls.errors["steps"].value


def test_panel_shows_the_experiments_own_error_beside_its_control():
    def validate(values):
        raise ValueError("lr 0.001 is too small for steps 10")

    panel = _panel(lambda values, report: None, validate=validate)
    assert panel.run() is False
    assert "too small" in panel.controls.errors["lr"].value and panel.state == "idle"


def test_panel_runs_in_a_thread_and_keeps_the_result():
    release = threading.Event()  # the run goes on only after the second run() was refused

    def train(values, report):
        release.wait(WAIT)
        for i in range(values["steps"]):
            time.sleep(0.01)
            if not report((i + 1) / values["steps"], list(range(i + 1))):
                return "stopped"
        return f"trained {values['agent']}"

    panel = _panel(train)
    assert panel.run() is True
    assert panel.run() is False  # one run at a time
    release.set()
    assert panel.wait(WAIT), "the run did not end"
    assert panel.state == "done" and panel.result == "trained a"
    assert panel.draws >= 2 and panel.progress.value == 1.0
    assert panel.image.value[:4] == b"\x89PNG"
    assert not panel.controls.widgets["steps"].disabled


def test_panel_pause_holds_and_stop_ends_within_one_interval():
    started, steps = threading.Event(), []

    def train(values, report):
        i = 0
        while True:
            started.set()
            steps.append(i)
            if not report(0.0, [i]):
                return i
            i += 1

    panel = _panel(train)
    panel.run()
    assert started.wait(WAIT), "the training thread never started"
    panel.pause()
    assert panel.held.wait(WAIT), "Pause never held the training thread at a report"
    held = len(steps)
    assert panel.state == "paused" and panel.pause_button.description == "Resume"
    assert panel.held.is_set() and len(steps) == held  # held: no step since
    panel.resume()
    wait_for(lambda: len(steps) > held + 1, "the training to go on after Resume")
    panel.stop()
    assert panel.wait(WAIT) and panel.state == "stopped"
    assert panel.result == steps[-1]


def test_panel_failure_is_shown_and_the_kernel_goes_on():
    def train(values, report):
        raise RuntimeError("diverged")

    panel = _panel(train)
    panel.run()
    assert panel.wait(WAIT), "the failing run did not end"
    assert panel.state == "failed" and "diverged" in panel.status.value


def test_panel_headless_shows_the_final_figure_and_values():
    panel = _panel(lambda values, report: None)
    panel.set_result([1, 3, 2], result="r")
    shown = panel.show(headless=True)
    assert isinstance(shown, Image) and panel.state == "done"
    assert panel.show(headless=False) is panel.widget


PI_PARAMS = dict(preset="default", env="Pendulum-v1", agent="mpo", depth=0, branching=2,
                 model="none", search_in="learning", updates_per_step=1, more_updates=2,
                 compare=False, seeds=1, total_steps=100, eval_every=50, vmpo_steps=5120,
                 widths=8, batch_size=8, learning_rate=3e-4, n_step=5, discount=0.99)


def test_policy_improvement_panel_trains_live_and_shows_q():
    from lab.widgets.policy_improvement_panel import policy_improvement_panel

    panel = policy_improvement_panel(PI_PARAMS)
    panel.min_interval = 0.0
    panel.controls.widgets["agent"].value = "search"  # with model none: refused up front
    assert panel.run() is False and "needs model" in panel.controls.errors["agent"].value
    panel.controls.widgets["agent"].value = "mpo"
    assert panel.run() is True
    assert panel.wait(300) and panel.state == "done", panel.error
    setup, result = panel.result
    assert result.history.returns.shape == (1, 3) and panel.draws >= 2
    viewer = panel.widget.children[-1]
    assert viewer.children[1].value == b""  # nothing drawn before asked
    from lab.widgets.policy_improvement_panel import ImprovedPolicyViewer
    view = ImprovedPolicyViewer(panel)
    view.slider.value = 5
    assert view.show() and view.image.value[:4] == b"\x89PNG"


def _fake_run(reports, name, started, curves, notebook="04_policy_improvement.ipynb"):
    import json

    folder = reports / "runs" / name
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text(json.dumps({
        "notebook": notebook, "run_dir": str(folder), "status": "ok", "started": started,
        "overrides": {"seeds": 2}}))
    (folder / "metrics.json").write_text(json.dumps({"curves": curves} if curves else {}))


def test_compare_view_overlays_recorded_curves_of_picked_runs(tmp_path, monkeypatch):
    from lab.widgets.compare import CompareView

    curve = {"x": [0, 10, 20], "y": [-1000, -500, -200], "xlabel": "steps", "ylabel": "return"}
    _fake_run(tmp_path, "a", "2026-11-22T10:00:00", {"mpo": curve})
    _fake_run(tmp_path, "b", "2026-11-22T11:00:00", {"mpo": curve, "vmpo": curve})
    _fake_run(tmp_path, "c", "2026-11-22T12:00:00", None)  # no curves: not listed
    _fake_run(tmp_path, "d", "2026-11-22T13:00:00", {"x": curve}, notebook="03_sac_ae.ipynb")
    view = CompareView(tmp_path, notebook="04_policy_improvement.ipynb")
    assert [r["started"][11:13] for r in view.runs] == ["11", "10"]  # newest first
    assert "seeds=2" in view.runs[0]["label"]
    assert list(view.curve.options) == ["mpo", "vmpo"] and view.image.value[:4] == b"\x89PNG"
    view.select.value = (1,)
    assert list(view.curve.options) == ["mpo"]
    assert len(CompareView(tmp_path).runs) == 3
    assert isinstance(view.show(headless=True), Image)
    assert "[ok]" in view.runs[0]["label"]
    assert view.widget.children[0].value.startswith("2 finished run(s) with curves")
    monkeypatch.setenv("LAB_RUN_DIR", str(tmp_path / "runs" / "b"))  # drawn inside run b
    inside = CompareView(tmp_path, notebook="04_policy_improvement.ipynb")
    assert "[this run]" in inside.runs[0]["label"]
    assert inside.widget.children[0].value.startswith("1 finished run(s) and this run with")


def test_mean_and_range_draws_the_seed_mean_and_band_and_says_so():
    from matplotlib.figure import Figure

    from lab.widgets.bands import mean_and_range

    ax = Figure().add_subplot()
    values = np.array([[1.0, 4.0, np.nan], [3.0, 2.0, np.nan], [2.0, 6.0, np.nan]])
    mean_and_range(ax, [0, 1, 2], values, label="mpo", color="C0")
    line, = ax.lines
    assert line.get_label() == "mpo: mean of 3 seeds, band min-max"
    np.testing.assert_allclose(line.get_ydata()[:2], [2.0, 4.0])
    assert np.isnan(line.get_ydata()[2])  # no seed there: a gap, not a warning
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 1.0 and band.max() == 6.0


def test_a_per_seed_curve_records_its_band_and_the_compare_view_draws_and_names_it(tmp_path):
    from matplotlib.figure import Figure

    from lab.runs.records import spread_curve
    from lab.widgets.compare import draw_overlay

    rows = [[1.0, 4.0, np.nan], [3.0, 2.0, np.nan], [2.0, 6.0, np.nan]]
    c = spread_curve([0, 1, 2], rows, xlabel="steps", ylabel="return")
    assert c == {"x": [0, 1, 2], "y": [2.0, 4.0, None], "low": [1.0, 2.0, None],
                 "high": [3.0, 6.0, None], "n": 3, "xlabel": "steps", "ylabel": "return",
                 "band": "mean of 3 seeds, band min-max"}  # JSON has no NaN: None
    orders = spread_curve([1, 2], [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0], [4.0, 9.0]],
                          unit="arrival orders", centre="median", spread="quartiles")
    assert (orders["y"], orders["low"], orders["high"]) == ([2.0, 3.0], [1.0, 2.0], [3.0, 4.0])
    assert orders["band"] == "median of 5 arrival orders, band interquartile range"
    one = spread_curve([0, 1], [[5.0, 6.0]])
    assert one["band"] == "one seed, no band" and "low" not in one
    with pytest.raises(ValueError, match="spread one of"):
        spread_curve([0], [[1.0]], spread="std")

    figure = Figure(layout="constrained")
    runs = [{"label": "run a", "curves": {"r": c}}, {"label": "run b", "curves": {"r": one}}]
    draw_overlay(figure, runs, "r")
    ax, = figure.axes
    assert len(ax.collections) == 1  # run a's band; run b has none to draw
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 1.0 and band.max() == 6.0
    legend, = figure.legends  # below the axes, off the data
    assert [t.get_text() for t in legend.get_texts()] == [
        "run a: mean of 3 seeds, band min-max", "run b: one seed, no band"]


def test_range_bars_reach_the_lowest_and_highest_value_and_are_never_negative():
    from lab.widgets.bands import range_bars

    values = [[1.0, 3.0, 2.0], [5.0], [0.7, 0.7, 0.7]]
    centres = [2.0, 5.0, np.mean([0.7, 0.7, 0.7])]
    assert centres[2] < 0.7  # the mean rounds a hair below every value it averages
    bars = range_bars(centres, values)
    np.testing.assert_allclose(bars, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], atol=1e-15)
    assert (bars >= 0).all()  # matplotlib refuses a negative error


SAC_PARAMS = dict(preset="default", env="pendulum_swingup", image_size=16, action_repeat=50,
                  steps=40, init_steps=20, eval_every=20, eval_episodes=1, seeds=1,
                  batch_size=4, hidden_dim=16, num_filters=4, replay_capacity=1000,
                  variants=["sac_ae", "pixel_sac"])


def test_sac_ae_panel_trains_and_shows_reconstructions(tmp_path):
    from lab.widgets.sac_ae_panel import sac_ae_panel

    panel = sac_ae_panel(SAC_PARAMS)
    panel.min_interval = 0.0
    panel.controls.widgets["steps"].value = 50
    assert panel.run() is False and "multiple of" in panel.controls.errors["steps"].value
    panel.controls.widgets["steps"].value = 40
    assert panel.run() is True
    assert panel.wait(300) and panel.state == "done", panel.error
    setup, run = panel.result
    assert run.variant == "sac_ae" and panel.draws >= 2
    assert panel.data["reconstructions"].shape == panel.data["frames"].shape
    from lab.widgets.sac_ae_panel import EpisodeViewer

    assert isinstance(panel.widget.children[-1].children[1].children[0], widgets.Play)

    view = EpisodeViewer(panel)
    assert view.load() and view.slider.max == len(view.pngs) - 1 == 1000 // 50
    view.slider.value = 3
    assert view.image.value == view.pngs[3] and view.image.value[:4] == b"\x89PNG"
    assert "reconstruction" in view.message.value


PP_PARAMS = dict(preset="default", dataset="iris", arch="mlp", hidden=[8], solver="exact",
                 optimizer="nesterov", lr=1.0, backprop_lr=0.05, tau=0.05, epochs=3,
                 batch_size=30, seeds=1, lr_grid=[0.1])


def test_proxprop_panel_trains_both_side_by_side_and_refuses_bad_values():
    from lab.widgets.proxprop_panel import proxprop_panel

    panel = proxprop_panel(PP_PARAMS)
    panel.min_interval = 0.0
    panel.controls.widgets["arch"].value = "conv"  # the exact solver needs Linear layers
    assert panel.run() is False and "cg3" in panel.controls.errors["solver"].value
    panel.controls.widgets["arch"].value = "mlp"
    assert panel.run() is True
    assert panel.wait(120) and panel.state == "done", panel.error
    assert set(panel.result) == {"BackProp", "ProxProp"} and panel.draws >= 2
    model, curves = panel.result["ProxProp"]
    assert curves.train_loss.shape == (4,) and curves.train_loss[-1] < curves.train_loss[0]
    assert set(panel.data["live"]) == {"BackProp", "ProxProp"}
    assert isinstance(panel.show(headless=True), Image)


GA3C_PARAMS = {"preset": "default", "game": "breakout", "sticky": 0.1, "seeds": 1,
               "seconds": 1.5, "agents": 3, "predictors": 1, "trainers": 1, "t_max": 5,
               "prediction_batch": 4, "training_batch": 10, "learning_rate": 3e-4,
               "entropy_cost": 0.01, "log_epsilon": 0.0, "a2c_envs": 2, "agent_counts": [1],
               "trainer_counts": [1], "throughput_seconds": 0.5, "lags": [0],
               "lag_updates": 5, "step_wait": 0.4, "initial_wait": 0.2,
               "adjust_seconds": 1.0, "adjust_seeds": 1, "adjust_starts": [[2, 1, 1]],
               "fixed_configs": [[2, 1, 1]], "checkpoint": False}


@pytest.mark.parametrize("execution", ["ga3c", "a3c"])
def test_ga3c_panel_runs_the_host_executions_live_and_leaves_no_thread(execution):
    from lab.train.ga3c import Result
    from lab.widgets.ga3c_panel import ga3c_panel

    before = threading.active_count()
    panel = ga3c_panel(GA3C_PARAMS)
    panel.min_interval = 0.0
    panel.controls.widgets["execution"].value = execution
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    assert isinstance(panel.result, Result) and panel.result.env_steps > 0
    assert panel.draws >= 2 and len(panel.data["history"]) >= 2
    assert set(panel.data["queue_history"][-1]) == ({"prediction", "training"}
                                                     if execution == "ga3c" else set())
    assert threading.active_count() == before  # the run's threads are joined
    assert isinstance(panel.show(headless=True), Image)


def test_a2c_panel_trains_live_and_refuses_bad_values():
    from lab.widgets.a2c_panel import a2c_panel
    from tests.test_a2c_experiment import NOTEBOOK

    panel = a2c_panel(NOTEBOOK)
    panel.min_interval = 0.0
    panel.controls.widgets["total_steps"].value = 150  # not a multiple of eval_every
    assert panel.run() is False and panel.state == "idle"  # refused before anything starts
    panel.controls.widgets["total_steps"].value = 200
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    returns, env_steps = panel.result
    assert returns.shape == (1, 1, 2) and env_steps[0].tolist() == [100, 200]
    assert panel.draws >= 1 and isinstance(panel.show(headless=True), Image)


def test_early_termination_panel_replays_against_random_search():
    from lab.sweeps.simulator import Curves
    from lab.widgets.early_termination_panel import early_termination_panel
    from tests.test_early_termination import SPEC

    params = tuple({"learning_rate": 1e-3, "t_max": 5, "discount": 0.99} for _ in range(8))
    values = np.tile(np.arange(8.0)[:, None], (1, SPEC.phases))  # early rank = final rank
    panel = early_termination_panel(Curves(SPEC, params, values), orders=5)
    panel.min_interval = 0.0
    assert panel.controls.widgets["trials"].max == 8  # the sliders hold every value in range
    assert panel.run() is True
    assert panel.wait(WAIT) and panel.state == "done", panel.error
    best = panel.result
    assert set(best) == {"hypertrick", "none"} and best["none"].shape == (5, 32)
    # random search runs all 8 trials and finds the best (7); HyperTrick never does worse
    # on the compute it used, since early rank is the final rank
    assert (best["none"][:, -1] == 7).all()
    assert panel.draws >= 1 and isinstance(panel.show(headless=True), Image)


# Every model notebook's panel: (panel module, experiment module whose PARAMETERS the
# notebook passes; None: its whole parameters cell). 08's panel takes recorded curves.
PANELS = {"01_proxprop": ("proxprop", None), "02_vsml": ("vsml", "vsml"),
          "03_sac_ae": ("sac_ae", "sac_ae"),
          "04_policy_improvement": ("policy_improvement", "policy_improvement"),
          "06_ga3c": ("ga3c", "ga3c"), "07_a2c": ("a2c", "a2c"),
          "08_early_termination": ("early_termination", None),
          "09_sequence_parallel": ("sequence_parallel", "sequence_parallel"),
          "10_automap": ("automap", "automap"), "11_interlocking": ("interlocking", "interlocking"),
          "12_pixelcnn": ("pixelcnn", "pixelcnn"), "13_parallel_wavenet": ("wavenet", "wavenet"),
          "14_causal_selection": ("causal_selection", "causal_selection")}
PNG = b"\x89PNG\r\n\x1a\n"


def _notebook_panel(stem: str, *args, **kw) -> Panel:
    """``stem``'s panel at its notebook's defaults with the smoke parameters, built the way
    the notebook builds it (``args``, ``kw``: the notebook's results)."""
    import importlib

    from lab.runs.params import notebook_parameters
    from tests.conftest import ROOT
    from tests.smoke import SMOKE

    name, experiment = PANELS[stem]
    make = getattr(importlib.import_module(f"lab.widgets.{name}_panel"), f"{name}_panel")
    if stem == "08_early_termination":
        from lab.sweeps.simulator import Curves
        from tests.test_early_termination import SPEC

        configs = tuple({"learning_rate": 1e-3, "t_max": 5, "discount": 0.99} for _ in range(4))
        curves = Curves(SPEC, configs, np.tile(np.arange(4.0)[:, None], (1, SPEC.phases)))
        return make(curves, *args, **kw)
    values = {n: p.default for n, p in notebook_parameters(
        ROOT / "notebooks" / f"{stem}.ipynb").items()} | SMOKE[stem]
    if experiment is not None:
        names = importlib.import_module(f"lab.experiments.{experiment}").PARAMETERS
        values = {n: values[n] for n in names}
    return make(values, *args, **kw)


def _images(widget) -> list[widgets.Image]:
    """The image widgets a reader sees in ``widget`` (hidden ones, such as a viewer's before
    it is asked, aside)."""
    if getattr(getattr(widget, "layout", None), "display", None) == "none":
        return []
    if isinstance(widget, widgets.Image):
        return [widget]
    return [image for child in getattr(widget, "children", ()) for image in _images(child)]


@pytest.mark.parametrize("stem", sorted(PANELS))
def test_panel_opens_on_a_figure_before_any_run(stem):
    """No run, no notebook result: the figure is the labelled empty axes, never an empty
    image (which a browser shows as a broken-image icon)."""
    panel = _notebook_panel(stem)
    images = _images(panel.widget)
    assert images and all(bytes(image.value[:8]) == PNG for image in images)
    assert panel.state == "idle" and panel.draws == 0


def _automap_stacks():
    from types import SimpleNamespace

    megatron = (1, 2, 1, 2)
    problem = SimpleNamespace(named=lambda: {"Megatron": megatron})
    return [{"layers": 2, "problem": problem, "runs": []},
            {"layers": 1, "problem": problem, "runs": [
                {"searcher": "mcts", "best_over_megatron": [9.0], "choice": [0, 0, 0, 0]},
                {"searcher": "greedy", "best_over_megatron": [3.0, 1.5, 1.0],
                 "choice": list(megatron)}]}]


def _ga3c_learned():
    from types import SimpleNamespace

    episodes = np.array([[0.5, 100, 1.0], [1.0, 200, 2.0]])
    return {"ga3c": [SimpleNamespace(episodes=episodes)], "a3c": []}


# Each notebook's results as it passes them to its panel (arguments, keyword arguments), in
# miniature: no training.
NOTEBOOK_RESULTS = {
    "06_ga3c": lambda: ((_ga3c_learned(),), {}),
    "07_a2c": lambda: (((np.array([[[1.0, 2.0, np.nan], [3.0, 4.0, np.nan]]]),
                         np.array([[100, 200, 300]])),), {}),
    "08_early_termination": lambda: ((), {"simulated": {
        "grid": np.arange(1.0, 5.0),
        "best": {m: np.ones((3, 4)) for m in ("hypertrick", "asha", "none")}}}),
    "09_sequence_parallel": lambda: (({"RSA, N=2": [{"loss": np.array([2.0, 1.0]),
                                                     "accuracy": np.array([0.2, 0.5])}]},), {}),
    "10_automap": lambda: ((_automap_stacks(),), {}),
    "11_interlocking": lambda: ((None, {"text": {"metric": "bits per character", "runs": {
        "local": {"steps": [5, 10], "curve": [[4.0, 3.5]]},
        "pairwise": {"steps": [5, 10], "curve": [[4.0, 3.0]]}}}}), {}),
    "12_pixelcnn": lambda: ((None,), {
        "samples": {"multiscale": np.ones((2, 32, 32), int)},
        "timing": {"multiscale": {32: {"seconds": 0.5, "deep": 9, "shallow": 0}}}}),
}


@pytest.mark.parametrize("stem", sorted(NOTEBOOK_RESULTS))
def test_panel_opens_on_the_notebooks_result(stem):
    args, kw = NOTEBOOK_RESULTS[stem]()
    panel = _notebook_panel(stem, *args, **kw)
    assert panel.state == "done" and panel.draws == 1  # drawn from the notebook's result
    assert bytes(panel.image.value[:8]) == PNG
