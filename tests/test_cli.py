"""``python -m lab run``'s papermill options, presets in batches, and refusals: all before any
kernel starts (``--prepare-only`` runs nothing), so these tests start none."""

import json

import nbformat
import pytest

from lab.cli import main
from lab.runs.params import notebook_presets
from tests.conftest import ROOT, write_notebook

PARAMS = 'name = "digits"\nepochs = 3\nlr = 0.1\nsizes = [4, 8]'


@pytest.fixture
def notebook(tmp_path):
    return write_notebook(tmp_path / "nb.ipynb", PARAMS, "print(name)")


def _prepared(out, stem="nb"):
    return json.loads((out / "prepared" / f"{stem}.parameters.json").read_text())


def test_parameters_merge_as_papermill_merges_them(notebook, tmp_path, capsys):
    """-f, then -y, then -p, then -r (raw, not converted); each recorded as explicit."""
    (tmp_path / "p.yaml").write_text("epochs: 7\nlr: 0.5\nsizes: [1, 2]\n")
    out = tmp_path / "out"
    code = main(["run", str(notebook), "-f", str(tmp_path / "p.yaml"), "-y", "{lr: 0.25}",
                 "-p", "epochs", "9", "-r", "name", "0.5", "--prepare-only", "--out", str(out)])
    assert code == 0
    record = _prepared(out)
    assert record["parameters"] == {"name": "0.5", "epochs": 9, "lr": 0.25, "sizes": [1, 2]}
    assert set(record["parameter_sources"].values()) == {"explicit"}
    assert "epochs = 9  (explicit)" in capsys.readouterr().out
    nb = nbformat.read(out / "prepared" / "nb.ipynb", as_version=4)
    injected = next(c for c in nb.cells if "injected-parameters" in c.metadata.tags)
    assert "epochs = 9" in injected.source and "name = \"0.5\"" in injected.source


@pytest.mark.parametrize("args, message", [
    (["-f", "missing.yaml"], "error: cannot read parameters file missing.yaml (No such file or "
     "directory); pass an existing YAML file to -f"),
    (["-y", "[1, 2]"], "error: -y must be a YAML mapping of parameter names to values, got list"),
    (["-y", "{epochs: [1"], "error: -y is not valid YAML ("),
    (["-r", "epochs", "5"], "error: parameter 'epochs' expects int, got '5' (-r passes a raw "
     "string; use -p)"),
    (["-y", "{epochs: 2.5}"], "error: parameter 'epochs' expects int, got 2.5"),
    (["-y", "{nope: 1}"], "error: unknown parameter 'nope' for nb.ipynb; valid names: name, "
     "epochs, lr, sizes"),
])
def test_bad_parameters_are_one_line_errors_that_write_nothing(notebook, tmp_path, capsys,
                                                               monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(notebook), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--all", "-p", "epochs", "2"], "-p, -r, -f and -y apply to one notebook"),
    (["NOTEBOOK", "--preset", "claim"], "--preset goes with --all"),
    (["--all", "--jobs", "0"], "--jobs must be at least 1, got 0"),
])
def test_misplaced_options_are_usage_errors(notebook, capsys, args, message):
    args = [str(notebook) if a == "NOTEBOOK" else a for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(["run", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_version_names_lab_its_commit_and_papermill(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lab 0.1.0, commit ") and "papermill " in out


def test_all_with_a_preset_prepares_every_notebook_that_has_it(tmp_path, capsys):
    """The issue's check: `--all --preset claim --prepare-only` lists every notebook with a
    `claim` preset, the others as skipped; an unknown preset is refused before anything."""
    out = tmp_path / "out"
    folder = str(ROOT / "notebooks")
    assert main(["run", "--all", "--notebooks", folder, "--preset", "claim", "--prepare-only",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    with_claim = [nb.stem for nb in notebooks if "claim" in notebook_presets(nb)]
    assert len(with_claim) >= 9
    assert sorted(p.stem for p in (out / "prepared").glob("*.ipynb")) == \
        sorted(f"{stem}-claim" for stem in with_claim)
    skipped = next(line for line in printed.splitlines() if line.startswith("skipped"))
    assert all((nb.name in skipped) == (nb.stem not in with_claim) for nb in notebooks)
    for stem in with_claim:
        record = _prepared(out, f"{stem}-claim")
        assert record["preset"] == "claim" and record["parameter_sources"]["preset"] == "explicit"
    assert main(["run", "--all", "--notebooks", folder, "--preset", "huge",
                 "--out", str(tmp_path / "o2")]) == 2
    assert f"no notebook in {folder} has a preset 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("args, message", [
    (["run", str(ROOT / "README.md")], "README.md is not a notebook; pass a .ipynb file"),
    (["run", "{nb}", "--timeout", "-5"],
     "--timeout must be at least 1 second per cell, got -5"),
    (["report", "--out", "{tmp}/nonexist"], "does not exist; pass the reports folder"),
    (["report", "--out", "{tmp}/file"], "/file is a file; pass the reports folder"),
    (["import", "{tmp}/nonexistent"], "nonexistent: not a folder; pass run folders"),
    (["import", "{tmp}/empty"], "empty: no provenance.json; a run folder needs"),
    (["sweep", "report", "--study", "nope", "--out", "{tmp}/sweeps_out"],
     "no study named 'nope' under"),
    (["sweep", "worker", "--study", "nope", "--out", "{tmp}/sweeps_out"],
     "no study named 'nope' under"),
])
def test_every_refusal_is_one_line_and_writes_nothing(tmp_path, notebook, capsys, args,
                                                      message):
    (tmp_path / "file").write_text("mine")
    (tmp_path / "empty").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = [a.format(tmp=tmp_path, nb=notebook) for a in args]
    assert main(argv + ([] if args[0] != "run" else ["--out", str(tmp_path / "out")])) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_run_without_a_notebook_shows_runs_own_usage(capsys):
    with pytest.raises(SystemExit):
        main(["run"])
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m lab run ") and "--time-limit" in err
    assert err.rstrip().endswith("error: give either one NOTEBOOK or --all")


def test_help_notebook_lists_every_parameter_and_what_each_preset_changes(capsys, tmp_path):
    path = ROOT / "notebooks" / "04_policy_improvement.ipynb"
    assert main(["run", str(path), "--help-notebook", "--out", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    from lab.runs.params import notebook_parameters

    for p in notebook_parameters(path).values():
        assert f"  {p.name}" in shown and f"= {p.default!r}" in shown
    claim = next(line for line in shown.splitlines() if line.startswith("  claim: "))
    assert "total_steps=20000" in claim and "seeds=" not in claim  # only what it changes
    assert "no ok run under" in claim and not (tmp_path / "runs").exists()
