"""The runner end to end, on small notebooks the tests write (no jax work)."""

import json
import os
import signal
import subprocess
import sys

import nbformat
import pytest

from lab.cli import main
from lab.runs import build_index, run_notebook
from tests.conftest import ROOT, WAIT, provenance, run_dirs, wait_for, write_notebook

pytestmark = pytest.mark.slow

PROVENANCE_FIELDS = {"parameters", "overrides", "seed", "git", "versions", "jax_devices",
                     "xla_flags", "host", "started", "ended", "status", "duration_s"}


def _lab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, capture_output=True,
                          text=True, **kwargs)


@pytest.fixture
def notebooks(tmp_path):
    folder = tmp_path / "notebooks"
    write_notebook(folder / "a_fails.ipynb", "x = 1", "print('before')",
                   "raise ValueError('deliberate failure')", "print('never')")
    write_notebook(folder / "b_records.ipynb", "x = 1\nseed = 3",
                   "import sys\nfrom lab.experiments import record\n"
                   "record(x=x, doubled=2 * x, python=sys.executable)",
                   "import matplotlib.pyplot as plt\nplt.plot([0, 1], [0, x])\nplt.show()")
    return folder


def test_run_all_continues_past_a_failure_and_reports_it(notebooks, tmp_path):
    out = tmp_path / "reports"
    result = _lab("run", "--all", "--notebooks", str(notebooks), "--out", str(out),
                  "--no-progress")
    assert result.returncode == 1
    assert result.stdout.strip().splitlines()[-1] == \
        "1 of 2 notebook(s) did not finish: a_fails.ipynb (failed)"
    failed, ok = run_dirs(out)
    assert json.loads((failed / "metrics.json").read_text()) == {}  # present, empty
    assert provenance(failed)["status"] == "failed"
    assert provenance(failed)["error"] == "ValueError: deliberate failure"
    assert provenance(ok)["status"] == "ok"
    # the failing run keeps its executed notebook, with the error in a banner at the top
    nb = nbformat.read(failed / "a_fails.ipynb", as_version=4)
    assert "This run failed in cell 2" in nb.cells[0].source
    assert "deliberate failure" in nb.cells[0].source
    html = (failed / "report.html").read_text()
    assert html.index("This run failed") < html.index("'before'")
    assert "Traceback" in html or "ValueError" in html
    index = (out / "index.html").read_text()
    assert 'class="failed">failed' in index and 'class="ok">ok' in index
    assert (out / "a_fails.html").exists() and (out / "b_records.html").exists()


def test_run_notebook_writes_records_provenance_and_figures(notebooks, tmp_path):
    out = tmp_path / "reports"
    result = run_notebook(notebooks / "b_records.ipynb", {"x": "4"}, out=out, progress=False)
    # the kernel ran this very interpreter, and its records landed in metrics.json
    assert result.metrics == {"x": 4, "doubled": 8, "python": sys.executable}
    run = provenance(result.run_dir)
    assert PROVENANCE_FIELDS <= set(run)
    assert run["parameters"] == {"x": 4, "seed": 3} and run["overrides"] == {"x": 4}
    assert run["seed"] == 3
    assert set(run["versions"]) == {"python", "jax", "jaxlib", "equinox", "optax", "papermill"}
    assert run["jax_devices"][0].startswith("cpu:0")
    assert set(run["git"]) == {"commit", "dirty"}
    assert json.loads((result.run_dir / "metrics.json").read_text()) == result.metrics
    assert run["figures"] == ["cell03-0.png"]
    assert (result.run_dir / "figures" / "cell03-0.png").read_bytes()[:4] == b"\x89PNG"
    html = result.report.read_text()
    assert "b_records.ipynb" in html and "data:image/png" in html
    # it declared no claims or headline: the header names how many values metrics.json holds
    assert "declares no claims" in html and "3 more recorded values" in html
    assert set(run["inputs"]) == {"notebook", "parameters", "dependencies", "modules", "data",
                                  "digest", "files"}
    assert "lab/runs/records.py" in run["inputs"]["files"]["modules"]
    assert run["kernel_time"]["wall_s"] > 0
    assert result.run_dir.name.startswith("b_records-")


TINY_EXPERIMENT = """
from lab.runs.params import with_preset

PRESETS = {"default": {}, "big": {"steps": 50, "width": 8}}


def configure(**params):
    if params["width"] < 1:
        raise ValueError(f"width must be at least 1, got {params['width']}")
    return with_preset(params, PRESETS)
"""


def test_an_explicit_value_beats_the_preset_in_the_kernel_and_the_record_says_so(
        tmp_path, monkeypatch):
    """``-p preset big -p steps 5``: the kernel trains 5 steps (the notebook's default, given
    explicitly, which a value-based rule would mistake for "not given"), the preset's width;
    provenance and the report header give each value's source."""
    (tmp_path / "tiny_experiment.py").write_text(TINY_EXPERIMENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the kernel imports it too
    path = write_notebook(tmp_path / "tiny.ipynb", 'preset = "default"\nsteps = 5\nwidth = 2',
                          "import tiny_experiment\nfrom lab.experiments import record\n"
                          "p = tiny_experiment.configure(preset=preset, steps=steps, "
                          "width=width)\nrecord(steps=p['steps'], width=p['width'])")
    nb = nbformat.read(path, as_version=4)
    nb.metadata["lab"] = {"validate": "tiny_experiment:configure"}
    nbformat.write(nb, path)
    result = run_notebook(path, {"preset": "big", "steps": "5"}, out=tmp_path / "r",
                          progress=False)
    assert result.status == "ok" and result.metrics == {"steps": 5, "width": 8}
    run = provenance(result.run_dir)
    assert run["preset"] == "big" and run["overrides"] == {"preset": "big", "steps": 5}
    assert run["parameters"] == {"preset": "big", "steps": 5, "width": 8}
    assert run["parameter_sources"] == {"preset": "explicit", "steps": "explicit",
                                        "width": "preset big"}
    assert "preset big" in result.report.read_text()


def test_the_record_names_the_devices_the_kernel_saw_without_asking_a_process(tmp_path,
                                                                              monkeypatch):
    from lab.runs import runner

    # the kernel makes its own three devices: a child of the runner would see one
    nb = write_notebook(tmp_path / "three.ipynb", "n = 3",
                        "import os\nos.environ['XLA_FLAGS'] = "
                        "f'--xla_force_host_platform_device_count={n}'\nimport jax\njax.devices()")
    monkeypatch.setattr(runner, "jax_devices", None)  # not asked: the kernel said
    result = run_notebook(nb, out=tmp_path / "reports", progress=False)
    assert provenance(result.run_dir)["jax_devices"] == [f"cpu:{i} cpu" for i in range(3)]


def test_provenance_asks_for_the_devices_again_when_the_device_environment_changes(
        monkeypatch):
    from lab.runs import provenance as prov

    monkeypatch.setattr(prov, "_devices_seen", {})
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
    three = prov.jax_devices()
    assert three == [f"cpu:{i} cpu" for i in range(3)]
    with monkeypatch.context() as m:
        m.setattr(subprocess, "run", None)  # a second ask would fail: it is remembered
        assert prov.jax_devices() == three
    # the remembered answer is for that device count only
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert prov.jax_devices() == ["cpu:0 cpu", "cpu:1 cpu"]


def test_run_notebook_hide_code_leaves_code_out(notebooks, tmp_path):
    result = run_notebook(notebooks / "b_records.ipynb", out=tmp_path / "r", hide_code=True,
                          progress=False)
    html = result.report.read_text()
    assert result.status == "ok" and "status-ok" in html
    assert "data:image/png" in html  # the outputs stay: the figure the last cell drew
    for code in ("x = 1", "record(x=x", "plt.plot(", "import sys"):  # every cell's code goes
        assert code not in html, code


@pytest.mark.parametrize("args, message", [
    (["-p", "nope", "1"],
     "error: unknown parameter 'nope' for b_records.ipynb; valid names: x, seed"),
    (["-p", "x", "abc"], "error: parameter 'x' expects int, got 'abc'"),
])
def test_cli_bad_parameter_fails_before_execution_and_writes_nothing(notebooks, tmp_path,
                                                                     args, message, capsys):
    out = tmp_path / "reports"
    code = main(["run", str(notebooks / "b_records.ipynb"), *args, "--out", str(out)])
    assert code == 2
    assert capsys.readouterr().err.strip() == message
    assert not out.exists()


def test_cli_refuses_an_unwritable_output_directory(notebooks, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    code = main(["run", str(notebooks / "b_records.ipynb"), "--out", str(blocker / "reports")])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: cannot write to output directory")
    assert blocker.read_text() == "keep me"


def test_cell_timeout_is_recorded_as_failed(tmp_path):
    # the per-cell limit is long enough for the quick cells on a busy machine; the sleep is
    # far longer, so only it can run past the limit
    notebook = write_notebook(tmp_path / "slow.ipynb", "seconds = 3600",
                              "import time\ntime.sleep(seconds)")
    result = run_notebook(notebook, out=tmp_path / "r", timeout=10, progress=False)
    assert result.status == "failed" and result.error.startswith("CellTimeoutError")
    assert "This run failed in cell 1" in result.report.read_text()


def test_a_named_presets_cells_get_hours_not_the_default_runs_half_hour():
    # a claim preset spends an hour in one cell (notebooks 10 and 11): the default limit
    # killed such runs after 30 minutes
    from lab.runs.runner import DEFAULT_CELL_TIMEOUT, cell_timeout
    assert cell_timeout(None) == cell_timeout("default") == DEFAULT_CELL_TIMEOUT == 1800
    assert cell_timeout("claim") == cell_timeout("gpu") == 6 * 3600


def test_dead_kernel_is_recorded_as_failed(tmp_path):
    notebook = write_notebook(tmp_path / "dies.ipynb", "code = 3", "import os\nos._exit(code)")
    result = run_notebook(notebook, out=tmp_path / "r", progress=False)
    assert result.status == "failed" and "DeadKernelError" in result.error
    assert result.report.exists()


def test_ctrl_c_marks_the_run_interrupted_and_keeps_it(tmp_path):
    # asleep far longer than the wait below, so Ctrl-C always comes while the cell runs
    # (it says so in a file in its run folder, its working directory: papermill saves a
    # cell's output only when the cell ends or another message comes)
    notebook = write_notebook(tmp_path / "sleepy.ipynb", "seconds = 3600",
                              "import pathlib, time\npathlib.Path('sleeping').touch()\n"
                              "time.sleep(seconds)")
    out = tmp_path / "r"
    # A job started in the background inherits SIGINT ignored, and so does all it starts;
    # a terminal's foreground job has Python's KeyboardInterrupt handler, which is what
    # this test is about: install it before running the CLI.
    cli = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
           " sys.argv = ['lab', *sys.argv[1:]]; runpy.run_module('lab', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", cli, "run", str(notebook), "--out", str(out),
                             "--no-progress"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def running():
        return any(out.glob("runs/*/sleeping"))

    try:
        wait_for(running, "the notebook's cell to start (it writes 'sleeping')", poll=0.2)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    # Python ignores a KeyboardInterrupt that lands in a weakref callback (one fired while an
    # import lock is released prints "Exception ignored in: <function _get_module_lock...>"):
    # that Ctrl-C is lost, as it would be in a terminal, and the user presses it again. So
    # does this test, after giving the first one a generous while to be handled.
    for _ in range(4):
        try:
            output, _ = proc.communicate(timeout=WAIT / 4)
            break
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
    else:
        output, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, output
    # the kernel is let finish the interrupted cell's reply before it is asked to stop (it
    # printed a ZMQError traceback: the reply sent on a socket its shutdown had closed)
    assert "ZMQError" not in output, output
    (folder,) = run_dirs(out)
    assert provenance(folder)["status"] == "interrupted"
    assert (folder / "report.html").exists() and (folder / "sleepy.ipynb").exists()


def test_report_command_rebuilds_the_index(notebooks, tmp_path):
    out = tmp_path / "reports"
    run_notebook(notebooks / "b_records.ipynb", out=out, progress=False)
    (out / "index.html").unlink()
    assert main(["report", "--out", str(out)]) == 0
    assert "b_records.ipynb" in (out / "index.html").read_text()
    assert build_index(out) == out / "index.html"


def test_report_embeds_widget_state(tmp_path):
    notebook = write_notebook(tmp_path / "widget.ipynb", "value = 3",
                              "import ipywidgets\nipywidgets.IntSlider(value=value)")
    result = run_notebook(notebook, out=tmp_path / "r", progress=False)
    html = result.report.read_text()
    assert "application/vnd.jupyter.widget-state+json" in html
    assert "IntSliderModel" in html


def test_kernels_talk_over_unix_sockets_and_listen_on_no_channel_port(tmp_path, capfd):
    """The runner's kernels use IPC transport: their five channels are Unix sockets, so the
    kernel warns of no unencrypted TCP. The one TCP listener left is ipykernel's own IOPub
    pipe (127.0.0.1, for forked children's output; ipykernel binds it whatever the
    transport), and the test checks it is the only one."""
    code = ("import os, psutil\nfrom ipykernel.kernelapp import IPKernelApp\n"
            "from lab.experiments import record\napp = IPKernelApp.instance()\n"
            "ports = [c.laddr.port for c in psutil.Process(os.getpid()).net_connections("
            "kind='inet') if c.status == psutil.CONN_LISTEN]\n"
            "record(transport=app.transport, ports=ports, pipe=app.iopub_thread._pipe_port, "
            "unix=len(psutil.Process(os.getpid()).net_connections(kind='unix')))")
    path = write_notebook(tmp_path / "sockets.ipynb", "x = 1", code)
    result = run_notebook(path, out=tmp_path / "reports", progress=False)
    assert result.status == "ok", result.error
    m = result.metrics
    assert m["transport"] == "ipc" and m["unix"] >= 5  # shell, iopub, stdin, control, hb
    assert set(m["ports"]) <= {m["pipe"]}
    assert "without encryption" not in capfd.readouterr().err


def test_sigterm_to_a_jobs_batch_records_every_running_notebook_interrupted(tmp_path):
    """`kill` (SIGTERM) to `lab run --all --jobs 2` alone, not its workers: the batch passes
    it on, each worker records its run as interrupted with its report, nothing stays
    running, and the command lists them and exits 130."""
    folder = tmp_path / "notebooks"
    for name in ("one", "two"):
        write_notebook(folder / f"{name}.ipynb", "seconds = 3600",
                       "import pathlib, time\npathlib.Path('sleeping').touch()\n"
                       "time.sleep(seconds)")
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "lab", "run", "--all", "--notebooks",
                             str(folder), "--jobs", "2", "--out", str(out), "--no-progress"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(list(out.glob("runs/*/sleeping"))) == 2,
                 "both notebooks' cells to start (each writes 'sleeping')", poll=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, output
    folders = run_dirs(out)
    assert len(folders) == 2, output
    for run in folders:
        assert provenance(run)["status"] == "interrupted", output
        assert (run / "report.html").exists()
    assert "2 of 2 notebook(s) did not finish" in output
    assert "ZMQError" not in output, output


def test_a_time_limit_stops_the_run_and_resume_continues_it_from_its_checkpoint(
        tmp_path, capsys, monkeypatch):
    """A notebook that checkpoints each of its 30 steps (0.2 s each) under a 10-s limit: its
    kernel is interrupted before the limit, the run recorded as interrupted with the command
    that resumes it; the resume (that command, from another folder: no --out) runs it again
    in the same folder from the checkpoint the first attempt left there, records the first
    attempt, finishes, and publishes its report and index in the reports folder that holds
    it, none where the command ran."""
    from lab.runs.runner import RunnerError

    notebook = write_notebook(
        tmp_path / "steps.ipynb", "steps = 30",
        "import os, pathlib, time\n"
        "from lab.experiments import record\n"
        "kept = pathlib.Path(os.environ['LAB_CHECKPOINT_DIR']) / 'step'\n"
        "kept.parent.mkdir(parents=True, exist_ok=True)\n"
        "start = int(kept.read_text()) if kept.exists() else 0\n"
        "for i in range(start, steps):\n"
        "    time.sleep(0.2)\n"
        # written whole, as checkpoints are: an interrupt between truncating and writing
        # left an empty file once (the test then read '' as a step)
        "    kept.with_name('next').write_text(str(i + 1))\n"
        "    kept.with_name('next').replace(kept)\n"
        "record(steps=steps, started_at=start)")
    out = tmp_path / "reports"
    first = run_notebook(notebook, out=out, progress=False, time_limit=10)
    assert first.status == "interrupted", first.error
    assert first.error.startswith("time limit of 10 s reached; resume with: python -m lab run ")
    assert f"--resume {first.run_dir}" in first.error
    assert provenance(first.run_dir)["duration_s"] < 10
    step = first.run_dir / "checkpoints" / "step"
    done = int(step.read_text()) if step.exists() else 0  # none if the kernel started late
    assert done < 30

    index = (out / "index.html").read_text()  # the interrupted run's
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = run_notebook(notebook, progress=False, resume=first.run_dir)
    assert again.status == "ok" and again.run_dir == first.run_dir
    assert list(elsewhere.iterdir()) == []
    assert (out / "steps.html").read_bytes() == (first.run_dir / "report.html").read_bytes()
    assert (out / "index.html").read_text() != index
    assert first.run_dir.name in (out / "index.html").read_text()
    assert again.metrics == {"steps": 30, "started_at": done}
    record = provenance(first.run_dir)
    assert [a["status"] for a in record["attempts"]] == ["interrupted"]
    shelved = first.run_dir / "attempts" / "1"
    assert json.loads((shelved / "provenance.json").read_text())["status"] == "interrupted"
    assert (shelved / "report.html").exists() and (first.run_dir / "report.html").exists()
    with pytest.raises(RunnerError, match="finished \\(ok\\); there is nothing to resume"):
        run_notebook(notebook, out=out, resume=first.run_dir)
    with pytest.raises(RunnerError, match="is a run of the reports folder .*; leave out --out"):
        run_notebook(notebook, out=tmp_path / "r", resume=first.run_dir)
    other = write_notebook(tmp_path / "other.ipynb", "x = 1", "x")
    with pytest.raises(RunnerError, match="is a run of steps.ipynb, not of other.ipynb"):
        run_notebook(other, out=out, resume=first.run_dir)
    assert main(["run", str(other), "--time-limit", "5", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--time-limit 5 is too short; give at least 10 seconds" in err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()
