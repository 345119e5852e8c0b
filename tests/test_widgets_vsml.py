"""The VS-ML panel with real ipywidgets objects: meta-training in chunks with a callback,
a live run, Pause and Stop, refused values, the sub-LSTM viewer and the headless picture.

Every run here uses one tiny ES configuration, so the whole file compiles the meta-training
chunk twice (2 and 6 iterations) and each evaluation once."""

import jax
import numpy as np
import pytest
from IPython.display import Image

from lab.experiments import vsml as experiment
from lab.models.meta_rnn import MetaRNN
from lab.widgets import vsml_panel as vp
from lab.widgets.controls import Control
from tests.conftest import WAIT, wait_for

PARAMS = dict(method="es", iterations=6, tasks_per_batch=2, lr=1e-2, meta_rnn_lr=1e-2,
              meta_rnn_tasks_per_batch=2, population=2, inputs=4, classes=3, hidden=[],
              layer_norm=False, steps=5, test_steps=6, test_episodes=2, seeds=1,
              tasks=["iris", "sum_sign"], image_tasks=[], theta="train", checkpoint=False,
              backprop_alpha=1.0, backprop_iterations=2)
CHUNK = 2  # meta-iterations per report: 2 x (2 tasks x 2 population members x 5 steps)


def _leaves(model):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(model)]


def test_meta_train_callback_stops_and_chunks_match_one_chunk(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CHECKPOINT_DIR", str(tmp_path))
    setup = experiment.configure(**PARAMS)
    seen = []
    full = experiment.meta_train(setup, "vsml", 0, every=CHUNK,
                                 callback=lambda *args: seen.append(args))
    assert [done for done, *_ in seen] == [2, 4, 6]
    assert [len(losses) for _, losses, _, _ in seen] == [2, 4, 6]
    np.testing.assert_array_equal(seen[-1][1], full.losses)
    once = experiment.meta_train(setup, "vsml", 0, every=6)
    np.testing.assert_allclose(once.losses, full.losses, rtol=1e-5)
    for a, b in zip(_leaves(once.model), _leaves(full.model), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    # stop after the first chunk: the learner then, NaN beyond; the checkpoint resumes
    kept = experiment.configure(**PARAMS | {"checkpoint": True})
    stopped = experiment.meta_train(kept, "vsml", 0, every=CHUNK,
                                    callback=lambda done, *_: done < CHUNK)
    assert stopped.origin == "meta-trained, stopped after 2 of 6 iterations"
    np.testing.assert_array_equal(stopped.losses[:2], full.losses[:2])
    assert np.isnan(stopped.losses[2:]).all()
    for a, b in zip(_leaves(stopped.model), _leaves(seen[0][3]), strict=True):
        np.testing.assert_array_equal(a, b)
    resumed = experiment.meta_train(kept, "vsml", 0, every=CHUNK)
    assert resumed.origin.startswith("resumed from iteration 2")
    np.testing.assert_array_equal(resumed.losses, full.losses)


@pytest.fixture(scope="module")
def ran():
    """A panel that has meta-trained the tiny configuration once, in its thread."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vp, "EPISODE_STEPS_PER_REPORT", CHUNK * 2 * 2 * 5)
        panel = vp.vsml_panel(PARAMS)
        panel.min_interval = 0.0
        assert panel.state == "idle" and panel.result is None
        assert panel.run()
        assert panel.wait(WAIT), "the panel's run did not end"
        yield panel


def test_vsml_panel_meta_trains_in_its_thread_and_keeps_the_result(ran):
    assert ran.state == "done", ran.error
    assert ran.draws >= 3  # one per chunk (3) and the final one
    assert bytes(ran.image.value).startswith(b"\x89PNG")
    run = ran.result
    assert (run.learner, run.task, run.seed) == ("vsml", "iris", 0)
    assert np.isfinite(run.trained.losses).all() and len(run.trained.losses) == 6
    data = ran.data
    assert len(data["losses"]) == 6 and data["accuracy"].shape == (PARAMS["test_steps"],)
    assert data["chance"] == pytest.approx(1 / 3)  # iris has 3 classes
    # the watched curve is the current theta's online accuracy on the watched episodes
    source = vp.watched_source(run.setup, "iris")
    np.testing.assert_array_equal(
        data["accuracy"], vp.stream_accuracy(run.trained.model, source, PARAMS["test_episodes"]))


def test_vsml_panel_pause_holds_and_stop_ends_at_the_next_report(ran):
    ran.controls.widgets["iterations"].value = 1000
    assert ran.run()
    wait_for(lambda: ran.fraction > 0 or ran.state != "running", "the first report")
    ran.pause()
    wait_for(ran.held.is_set, "the meta-training thread to hold at its next report")
    blocked = ran.fraction
    assert ran.state == "paused" and ran.held.is_set() and ran.fraction == blocked
    ran.stop()
    assert ran.wait(WAIT) and ran.state == "stopped"
    losses = ran.result.trained.losses
    assert np.isfinite(losses).sum() == round(blocked * 1000) < 1000
    assert "stopped after" in ran.result.trained.origin
    ran.controls.widgets["iterations"].value = PARAMS["iterations"]


def test_vsml_panel_refuses_invalid_values_beside_their_control():
    panel = vp.vsml_panel(PARAMS)
    panel.controls.widgets["iterations"].value = 0
    assert panel.run() is False and panel.state == "idle"
    assert "iterations must be at least 1" in panel.controls.errors["iterations"].value
    panel.controls.widgets["iterations"].value = 6
    panel.controls.widgets["task"] = type("W", (), {"value": "imagenet", "disabled": False})()
    assert panel.run() is False
    assert "task must be one of iris, sum_sign, digits" in panel.controls.errors["task"].value
    panel.controls.widgets["task"] = type("W", (), {"value": "iris", "disabled": False})()
    # a value the control allows but the experiment's configure refuses
    panel.controls.specs["classes"] = Control("classes", int)
    panel.controls.widgets["classes"] = type("W", (), {"value": 11, "disabled": False})()
    assert panel.run() is False and panel.state == "idle" and panel.result is None
    assert "classes must be between 2 and 10" in panel.controls.errors["classes"].value


def test_vsml_panel_lr_and_batch_controls_follow_the_learner():
    panel = vp.vsml_panel(PARAMS | {"meta_rnn_lr": 3e-2, "meta_rnn_tasks_per_batch": 7})
    panel.controls.widgets["learner"].value = "meta_rnn"
    assert panel.controls.values()["lr"] == pytest.approx(3e-2)
    assert panel.controls.values()["tasks_per_batch"] == 7
    setup, learner, _, _ = panel._validate(panel.controls.values())
    assert setup.learner_config("meta_rnn").tasks == 7 and setup.meta.tasks == 2
    assert not setup.checkpoint  # panel runs never touch the notebook's checkpoints
    panel.controls.widgets["learner"].value = "vsml"
    assert panel.controls.values()["lr"] == pytest.approx(1e-2)


def test_sub_lstm_viewer_draws_states_and_refuses_the_meta_rnn(ran):
    viewer = vp.SubLSTMViewer(ran)
    assert viewer.show() and bytes(viewer.image.value).startswith(b"\x89PNG")
    assert viewer.slider.max == PARAMS["test_steps"] - 1
    first = viewer.image.value
    viewer.slider.value = 3  # the slider redraws
    assert viewer.image.value != first
    run = ran.result
    episode = vp.sub_lstm_episode(run, jax.random.key(vp.WATCH_KEY + 1))
    assert episode["c"].shape == (6, 4, 3, 16) and episode["W"].shape == (6, 4, 3)

    rnn = MetaRNN(PARAMS["inputs"], PARAMS["classes"], hidden=4, key=jax.random.key(0))
    ran.set_result(ran.data, vp.Run(run.setup, "meta_rnn", "iris", 0,
                                    experiment.Trained(rnn, run.trained.losses, "built")))
    assert viewer.show() is False and "has no sub-LSTMs" in viewer.message.value
    ran.set_result(ran.data, run)


def test_sub_lstm_states_without_an_effective_weight_say_so():
    from matplotlib.figure import Figure

    rng = np.random.default_rng(0)
    episode = {"ys": np.zeros(5, int), "h": rng.normal(size=(5, 4, 2, 16)),
               "c": rng.normal(size=(5, 4, 2, 16)), "W": None}
    figure = Figure()
    vp.draw_states(figure, episode, 2, "digits")
    assert len(figure.axes) == 2 * vp.STATES_SHOWN * 2  # heatmaps and their colour bars
    assert "W_t only for one VS-ML layer" in figure.axes[0].get_title()


def test_vsml_panel_shows_the_notebooks_learner_and_renders_headless(ran):
    panel = vp.vsml_panel(PARAMS, {"vsml": [ran.result.trained], "meta_rnn": []})
    assert panel.state == "done" and panel.draws == 1
    assert panel.result.trained is ran.result.trained and panel.data["earlier"]
    assert isinstance(panel.show(headless=True), Image)
    assert panel.show(headless=False) is panel.widget


def test_vsml_panel_watches_the_meta_test_tasks_and_the_meta_training_dataset():
    assert vp.watchable(experiment.configure(**PARAMS)) == ("iris", "sum_sign", "digits")
    # the mnist preset meta-tests held-out mnist_5k: watched once, on its test split
    mnist = experiment.configure(**PARAMS | {"preset": "mnist"})
    assert vp.watchable(mnist) == ("mnist_5k", "fashion_mnist")
    assert vp.watched_source(mnist, "mnist_5k").x.shape == (1000, 49)
    digits = vp.watched_source(experiment.configure(**PARAMS), "digits")
    assert digits.steps == PARAMS["test_steps"] and digits.classes == PARAMS["classes"]
    panel = vp.vsml_panel(PARAMS | {"preset": "mnist"})  # its tasks are the preset's
    assert panel.controls.widgets["task"].options == ("mnist_5k", "fashion_mnist")
