"""Sweeps: the spec's checks, HyperTrick's rule, the seeded sampler, and whole sweeps of a
small notebook with 4 worker processes on SQLite and 2 on a real PostgreSQL server."""

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import optuna
import pytest
from optuna.trial import TrialState

from lab.runs.records import read_metrics
from lab.sweeps import HyperTrickPruner, SpecError, TrialSeededSampler, load_spec, run_sweep
from lab.sweeps import report as sweep_report
from lab.sweeps.hypertrick import ranks_below
from lab.sweeps.study import load, make_storage
from tests.conftest import WAIT, wait_for

optuna.logging.set_verbosity(optuna.logging.WARNING)


def toy_notebook(path: Path) -> Path:
    """A notebook that "trains" for ``steps`` evaluations, scoring -(x - 0.3)^2 more surely
    as it goes, reports each to the sweep, and raises when ``crash``."""
    params = nbformat.v4.new_code_cell(
        "x = 0.5  # the parameter to find\nsteps = 4  # evaluations\n"
        "crash = False  # raise in the notebook\nsleep = 0.0  # seconds per evaluation")
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import time\n"
        "from lab.experiments import record, report_phase\n"
        "if crash:\n"
        "    raise RuntimeError('the notebook crashed')\n"
        "for i in range(1, steps + 1):\n"
        "    time.sleep(sleep)\n"
        "    score = -(x - 0.3) ** 2 * i / steps\n"
        "    if not report_phase(i / steps, score):\n"
        "        break\n"
        "record(score=score, evaluations=i)")
    nb = nbformat.v4.new_notebook(cells=[params, body])
    nb.metadata["kernelspec"] = {"name": "lab", "display_name": "Python (lab)",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def toy(tmp_path):
    return toy_notebook(tmp_path / "toy.ipynb")


def _spec(toy, **changes):
    return {"name": "toy", "notebook": str(toy), "metric": "score", "direction": "maximize",
            "space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
            "phases": 4, "survival": 0.5, "trials": 8, "workers": 4} | changes


def test_spec_loads_from_yaml_as_from_a_dict(toy, tmp_path):
    import yaml

    raw = _spec(toy, fixed={"sleep": 0.0}, space={
        "x": {"type": "choice", "values": [0.9, 0.95, 0.99, 0.995, 0.999]},
        "steps": {"type": "qloguniform", "low": 2, "high": 100, "q": 1},
        "sleep": {"type": "loguniform", "low": 1e-5, "high": 1e-2}})
    raw["fixed"] = {"crash": False}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    spec = load_spec(path)
    assert spec == load_spec(raw) == load_spec(spec.as_dict())
    assert [d.kind for d in spec.space] == ["choice", "qloguniform", "loguniform"]


@pytest.mark.parametrize("change, message", [
    ({"pruner": "asha"}, "pruner must be one of"),
    ({"survival": 1.5}, "survival must be in (0, 1]"),
    ({"phases": 0}, "phases must be an integer of at least 1"),
    ({"workers": "4"}, "workers must be an integer"),
    ({"colour": 1}, "unknown field(s) colour"),
    ({"space": {"x": {"type": "uniform", "low": 1.0, "high": 0.0}}}, "space.x: low (1.0)"),
    ({"space": {"x": {"type": "loguniform", "low": 0.0, "high": 1.0}}}, "space.x.low must be"),
    ({"space": {"x": {"type": "normal", "low": 0.0, "high": 1.0}}}, "space.x.type 'normal'"),
    ({"space": {"y": {"type": "uniform", "low": 0.0, "high": 1.0}}}, "unknown parameter(s) y"),
    ({"fixed": {"steps": "four"}}, "parameter 'steps' expects int"),
    ({"notebook": "missing.ipynb"}, "notebook missing.ipynb does not exist"),
    ({"direction": "up"}, "direction must be one of"),
])
def test_a_malformed_spec_names_the_field_before_anything_runs(toy, tmp_path, change,
                                                               message):
    with pytest.raises(SpecError, match=None) as info:
        load_spec(_spec(toy, **change))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_refuses_a_bad_spec_with_one_line_and_writes_nothing(toy, tmp_path, capsys):
    import yaml

    from lab.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_spec(toy, survival=0)))
    out = tmp_path / "reports"
    assert main(["sweep", "run", str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err == "error: survival must be in (0, 1], got 0\n"
    assert not out.exists()


def test_hypertrick_keeps_the_top_fraction_of_those_that_reached_the_phase():
    # ceil(0.5 * n) may be better: the first to arrive always goes on
    assert not ranks_below(1.0, [1.0], 0.5, maximize=True)
    assert ranks_below(1.0, [2.0, 1.0], 0.5, maximize=True)  # 1 better, ceil(1) = 1
    assert not ranks_below(2.0, [2.0, 1.0], 0.5, maximize=True)
    assert not ranks_below(1.0, [2.0, 1.0, 0.0], 0.5, maximize=True)  # 1 better < ceil(1.5)
    assert ranks_below(2.0, [2.0, 1.0, 0.0], 0.5, maximize=False)  # 2 better >= ceil(1.5)
    assert not ranks_below(1.0, [3.0, 2.0, 1.0], 1.0, maximize=True)  # r = 1 keeps all


def test_hypertrick_in_a_study_prunes_late_worse_trials_and_never_the_last_phase():
    study = optuna.create_study(direction="maximize", pruner=HyperTrickPruner(3, 0.5))
    decisions = []
    for score in [5.0, 1.0, 9.0, 0.5]:  # constant over phases; trials one after another
        trial = study.ask()
        pruned_at = None
        for phase in (1, 2, 3):
            trial.report(score, phase)
            if trial.should_prune():
                pruned_at = phase
                break
        decisions.append(pruned_at)
        study.tell(trial, state=TrialState.PRUNED) if pruned_at else study.tell(trial, score)
    # 5: first, survives; 1: below 5 (1 better >= ceil(1)); 9: best; 0.5: 2 better >= ceil(1.5)
    assert decisions == [None, 1, None, 1]


@pytest.mark.parametrize("name", ["hypertrick", "none", "successive_halving", "hyperband",
                                  "median"])
def test_every_pruner_named_in_a_spec_decides_on_reported_phases(toy, name):
    from lab.sweeps.study import make_pruner

    spec = load_spec(_spec(toy, pruner=name))
    # Hyperband puts a trial in a bracket by crc32 of the study's name and the trial's number:
    # a fixed name makes its decisions the same every run (with a random one, every trial of
    # this short study went unpruned in 2 of 200 studies: a CI failure now and then)
    study = optuna.create_study(study_name="pruners", direction="maximize",
                                pruner=make_pruner(spec))
    for score in [1.0, 2.0, 0.0, 0.5, 3.0, -1.0]:
        trial = study.ask()
        for phase in range(1, spec.phases + 1):
            trial.report(score, phase)
            if trial.should_prune():
                study.tell(trial, state=TrialState.PRUNED)
                break
        else:
            study.tell(trial, score)
    pruned = [t for t in study.get_trials() if t.state == TrialState.PRUNED]
    assert (name == "none") == (not pruned)


def test_report_phase_outside_a_sweep_says_go_on(monkeypatch):
    from lab.sweeps.phases import report_phase

    monkeypatch.delenv("LAB_SWEEP", raising=False)
    assert report_phase(0.5, float("nan")) is True


def test_trial_seeded_sampler_draws_the_same_configuration_per_trial_number():
    space = {"lr": optuna.distributions.FloatDistribution(1e-5, 1e-2, log=True),
             "n": optuna.distributions.IntDistribution(2, 100, log=True),
             "g": optuna.distributions.CategoricalDistribution([0.9, 0.99, 0.999])}

    def draws(seed, count):
        study = optuna.create_study(sampler=TrialSeededSampler(seed))
        out = []
        for _ in range(count):
            trial = study.ask(space)
            out.append(trial.params)
            study.tell(trial, 0.0)
        return out

    a, b = draws(7, 200), draws(7, 200)
    assert a == b and draws(8, 3) != a[:3]
    assert all(1e-5 <= p["lr"] <= 1e-2 and 2 <= p["n"] <= 100 for p in a)
    import numpy as np

    logs = np.log10([p["lr"] for p in a])
    assert abs(np.median(logs) - (-3.5)) < 0.3  # log-uniform: the middle of [-5, -2]
    assert {p["g"] for p in a} == {0.9, 0.99, 0.999}


def swept(study) -> list:
    """The trials the sweep ran: a worker that loses the race for the last waiting trial
    leaves a FAIL trial marked surplus (lab.sweeps.worker), which the report leaves out."""
    return [t for t in study.get_trials() if not t.user_attrs.get("surplus")]


def _check_finished_sweep(study, spec, out):
    trials = swept(study)
    assert len(trials) == spec.trials, [t.state for t in trials]
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
               for t in trials)
    runs = sorted((out / "sweeps" / spec.name / "runs").iterdir())
    assert len(runs) == spec.trials  # every trial is one run, none ran twice
    for t in trials:
        folder = Path(t.user_attrs["run_dir"])
        provenance = json.loads((folder / "provenance.json").read_text())
        assert (folder / "report.html").exists()
        if t.state == TrialState.PRUNED:
            phase = read_metrics(folder)["pruned_at_phase"]
            assert provenance["status"] == "pruned" and phase == max(t.intermediate_values)
            assert phase < spec.phases
        if t.state == TrialState.COMPLETE:
            assert t.value == read_metrics(folder)["score"] and provenance["status"] == "ok"
            assert sorted(t.intermediate_values) == [1, 2, 3, 4]
    page = sweep_report.write(study, out)
    ran = sum(t.state != TrialState.FAIL for t in trials)
    assert "report.html" in page.read_text() and sweep_report.survival(study)[0] == ran


@pytest.mark.slow
def test_a_sweep_with_4_workers_on_sqlite_prunes_and_survives_a_crashing_notebook(toy,
                                                                                  tmp_path):
    spec = load_spec(_spec(toy, trials=12, space={
        "x": {"type": "uniform", "low": 0.0, "high": 1.0},
        "crash": {"type": "choice", "values": [False, False, False, True]}}))
    out = tmp_path / "reports"
    study = run_sweep(spec, out=out, workers=4)
    crashed = [t for t in swept(study) if t.params["crash"]]
    assert crashed and all(t.state == TrialState.FAIL and "crashed" in t.user_attrs["error"]
                           for t in crashed)
    states = {t.state for t in swept(study) if not t.params["crash"]}
    assert TrialState.PRUNED in states and TrialState.COMPLETE in states
    _check_finished_sweep(study, spec, out)
    with pytest.raises(ValueError, match="already exists"):  # nothing of it is touched
        run_sweep(spec, out=out)
    from lab.cli import main

    page = out / "sweeps" / "toy.html"
    page.unlink()
    assert main(["sweep", "report", "--study", "toy", "--out", str(out)]) == 0
    assert page.exists()


def _worker(storage, name, out, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "lab", "sweep", "worker", "--storage", storage, "--study", name,
         "--out", str(out)], env=os.environ | (env or {}), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_killed_workers_trial_is_failed_by_heartbeat_and_run_again(toy, tmp_path,
                                                                      monkeypatch):
    from lab.sweeps.study import create, default_storage

    fast = {"LAB_SWEEP_HEARTBEAT": "1", "LAB_SWEEP_GRACE": "3"}
    # 4 evaluations of 1 s each after the kernel starts: the victim is killed before its kernel
    spec = load_spec(_spec(toy, trials=1, retries=1, fixed={"sleep": 1.0}, pruner="none"))
    out = tmp_path / "reports"
    url = default_storage(out, spec.name)
    create(spec, url)
    victim = _worker(url, spec.name, out, fast)
    study, _ = load(url, spec.name)
    # the worker beats before it samples the parameters: once they are recorded, the trial has
    # a heartbeat (a trial killed before its first beat can never go stale)
    wait_for(lambda: [t for t in study.get_trials(states=(TrialState.RUNNING,))
                      if "parameters" in t.user_attrs],
             "the victim worker to start its trial", poll=0.2)
    os.killpg(victim.pid, signal.SIGKILL)  # the worker and its notebook's kernel
    victim.wait()

    def next_worker_fails_it():
        # until the trial has had no heartbeat for the grace period, a worker finds nothing
        # waiting and leaves; after, it fails the trial as stale and runs its retry
        assert _worker(url, spec.name, out, fast).wait(timeout=WAIT) == 0
        return study.get_trials()[0].state == TrialState.FAIL

    wait_for(next_worker_fails_it, "a worker to fail the killed worker's trial", poll=0.2)
    first, retry = study.get_trials()
    assert first.state == TrialState.FAIL
    assert retry.state == TrialState.COMPLETE and retry.params == first.params
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 0


def test_sweeps_use_optuna_public_api_only():
    # Optuna's private attributes may change in any minor release and break every sweep
    root = Path(__file__).resolve().parents[1]
    sources = sorted((root / "lab" / "sweeps").glob("*.py"))
    private = re.compile(r"\._storage\b|\._trial_id\b|\._study_id\b|\bTrial\(")
    assert {"worker.py", "phases.py"} <= {path.name for path in sources}
    uses = [f"{path.relative_to(root)}:{number}: {line.strip()}" for path in sources
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if private.search(line)]
    assert not uses, "\n".join(uses)
    assert private.search("study._storage.get_trial(trial._trial_id)")  # it can fail
    assert all(private.search(f"{name}(study, 3)")
               for name in ("optuna.trial.Trial", "optuna.Trial", "Trial"))
    assert not private.search("optuna.trial.FrozenTrial(") and not private.search("t.number")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A PostgreSQL server on 127.0.0.1 in a temporary folder (Debian's postgresql)."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql "
                    "(scripts/system_deps.sh does)")
    bindir = Path(bins[-1]).parent
    folder = Path(tempfile.mkdtemp(prefix="lab-postgres-"))  # pytest's folders are root's only
    data, port = folder / "data", _free_port()
    prefix = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(folder, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*prefix, bindir / "initdb", "-D", data, "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True)
    subprocess.run([*prefix, bindir / "pg_ctl", "-D", data, "-w", "-l", folder / "log", "-o",
                    f"-h 127.0.0.1 -p {port} -k {folder}", "start"], check=True,
                   capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_sweep_with_2_workers_on_a_real_postgresql_server(toy, tmp_path, postgres):
    # one trial each, at once: the server's part is concurrent workers sharing one study
    # (pruning and crashes are the SQLite test's; 4 workers there, 2 here: 18 s less CPU)
    spec = load_spec(_spec(toy, trials=2, workers=2))
    out = tmp_path / "reports"
    study = run_sweep(spec, out=out, storage=postgres)
    assert {t.state for t in swept(study)} <= {TrialState.COMPLETE, TrialState.PRUNED}
    _check_finished_sweep(study, spec, out)
    assert not (out / "sweeps" / "toy.db").exists()  # the study lives in PostgreSQL
    assert make_storage(postgres).get_all_studies()[0].study_name == "toy"


def test_tpe_is_selectable_and_seeded_per_worker(toy):
    from lab.sweeps.study import make_sampler

    spec = load_spec(_spec(toy, sampler="tpe", seed=3))
    first = make_sampler(spec, 0)
    assert isinstance(first, optuna.samplers.TPESampler)
    study = optuna.create_study(direction="maximize", sampler=first)
    study.optimize(lambda t: -(t.suggest_float("x", 0, 1) - 0.3) ** 2, n_trials=3)
    assert isinstance(make_sampler(load_spec(_spec(toy)), 0), TrialSeededSampler)
    proposals = [optuna.create_study(sampler=make_sampler(spec, worker)).ask().suggest_float(
        "x", 0, 1) for worker in (0, 1, 0)]
    assert proposals[0] == proposals[2] != proposals[1]  # one seed per worker, reproducible
