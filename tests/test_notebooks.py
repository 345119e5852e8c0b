"""Every notebook in notebooks/: committed clean, and runnable through the runner and
through plain papermill with smoke parameters."""

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from lab.runs import notebook_parameters, run_notebook
from lab.runs.claims import VERDICTS
from lab.runs.records import RUN_DIR_ENV, read_metrics
from lab.runs.rederive import experiment_module
from lab.runs.verdict import mismatches
from tests.conftest import ROOT
from tests.smoke import SMOKE

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def own_smoke(path) -> dict | None:
    """The smoke parameters a family made by ``python -m lab new`` keeps in its notebook's
    metadata (``lab.smoke``); its own tests/test_NAME.py runs it."""
    return json.loads(path.read_text())["metadata"].get("lab", {}).get("smoke")


SMOKE = SMOKE | {nb.stem: own_smoke(nb) for nb in NOTEBOOKS if nb.stem not in SMOKE
                 and own_smoke(nb) is not None}
RUN_HERE = [nb for nb in NOTEBOOKS if own_smoke(nb) is None]

# Metrics each notebook must record.
HEADLINE = {
    "00_quickstart": {"test_accuracy", "test_loss", "train_loss"},
    "01_proxprop": {"backprop_tuned_lr", "proxprop_tuned_lr", "proxprop_seconds_per_epoch"},
    "02_vsml": {"iris_vsml_accuracy",
                "gradient_alignment", "backprop_mean_gap", "backprop_imitation_w"},
    "03_sac_ae": {"threshold",
                  "random_return", "sac_ae_final_return", "pixel_sac_final_return"},
    "04_policy_improvement": {"threshold", "search_d1_true_final_return",
                              "search_d1_true_steps_to_threshold", "search_d1_true_kl_mean"},
    "05_sweeps": {"comparisons", "mean_hypertrick_best",
                  "mean_random_best", "expected_survivors"},
    "06_ga3c": {"ga3c_env_steps_per_s_by_agents", "a2c_over_ga3c_env_steps"},
    "07_a2c": {"a2c_final_return", "env_steps", "returns"},
    "08_early_termination": {"a2c_spearman", "mpo_spearman", "simulated",
                             "hypertrick_at_least_random", "a2c_curves", "mpo_curves"},
    "09_sequence_parallel": {"max_output_error", "curve_max_abs_difference",
                             "local_final_accuracy", "mlp_crossover_bl", "batch_ratio",
                             "length_ratio", "max_batch_by_devices", "communication"},
    "10_automap": {"heuristic_over_megatron_bytes", "data_parallel_over_megatron_bytes",
                   "named", "stacks", "regime", "exact"},
    "11_interlocking": {"text_final", "text_time_per_batch", "text_pairwise_time_over_local",
                        "pipeline"},
    "12_pixelcnn": {"sequential_bits_per_dim", "multiscale_bits_per_dim",
                    "multiscale_gap_relative", "sampling_seconds", "evaluations",
                    "multiscale_speedup", "evaluations_match_formula", "sequential_parameters",
                    "multiscale_parameters"},
    "13_parallel_wavenet": {"teacher_held_out_bits", "student_bits_gap", "student_lsd_ratio",
                            "no_power_lsd_ratio", "student_over_cached", "samples_per_second",
                            "real_time_factor", "quality", "provenance"},
    "14_causal_selection": {"table", "pooled_causal_search", "pooled_impostor_search",
                            "pooled_causal_fixed", "diabetes_causal_search",
                            "cells_causal_beats_validation", "floored"},
}


# Notebooks whose smoke run declares no claim: 00 and 07 have none (not papers), 04's smoke
# run trains one variant, too few for any of its claims. Every other notebook's smoke run
# records at least one claim, each declared in its experiment module (``CLAIMS``) and
# reproduced from its own record by the shared rule (``lab claims verify``).
NO_CLAIMS = {"00_quickstart", "04_policy_improvement", "07_a2c"}


# What belongs on a paper's page (docs/papers/<family>.md), not in a notebook, whose report
# speaks of its own run: a run's date, a commit hash, a recorded run's folder, an old figure
# beside a new one ("(was 0.52)"). And no markdown cell over 40 lines.
RUN_SPECIFIC = re.compile(r"\b20\d\d-\d\d-\d\d\b"  # a date
                          r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"  # a commit
                          r"|results/\d\d_|\(was [-+]?\d")
MARKDOWN_LINES = 40


def run_specific(markdown: list[str]) -> list[str]:
    """``cell i: what`` for each markdown cell too long or naming a particular run."""
    out = []
    for i, text in enumerate(markdown):
        if len(text.splitlines()) > MARKDOWN_LINES:
            out.append(f"cell {i}: {len(text.splitlines())} lines (at most {MARKDOWN_LINES})")
        out += [f"cell {i}: {m.group(0)!r}" for m in RUN_SPECIFIC.finditer(text)]
    return out


def test_the_run_specific_check_finds_what_it_should():
    planted = ["# A method\nThe run of 2026-11-26 (commit 0b6cd5d, `results/14_causal-x`)",
               "share 0.61 (was 0.52)", "\n".join(["a line"] * 41),
               "28x28 -> 7x7 pixels, seeds 0-4, Adam 3e-3, deadbeef is a word"]
    assert run_specific(planted) == ["cell 0: '2026-11-26'", "cell 0: '0b6cd5d'",
                                     "cell 0: 'results/14_'", "cell 1: '(was 0'",
                                     "cell 2: 41 lines (at most 40)"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_markdown_speaks_of_its_own_run_and_links_its_papers_page(path):
    """The markdown states nothing of another run (that is the paper's page), each cell
    short; a notebook with claims links its family's page from its first cell."""
    cells = nbformat.read(path, as_version=4).cells
    markdown = ["".join(c.source) for c in cells if c.cell_type == "markdown"]
    assert run_specific(markdown) == []
    if getattr(experiment_module(path), "CLAIMS", None):
        page = f"docs/papers/{re.sub(r'^[0-9]+_', '', path.stem)}.md"
        assert (ROOT / page).exists() and page in markdown[0], page


def test_every_notebook_has_smoke_parameters():
    assert {nb.stem for nb in NOTEBOOKS} == set(SMOKE)
    assert {nb.stem for nb in RUN_HERE} == set(HEADLINE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, \
                f"{path.name} has outputs; clear them before committing"
    assert nb.metadata.kernelspec.name == "lab"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_parameters_cell_holds_the_smoke_names(path):
    assert set(SMOKE[path.stem]) <= set(notebook_parameters(path))


# The second, plain-papermill run checks that papermill alone records a run (LAB_RUN_DIR) and
# that the same parameters and seed give the same metrics. Recording is one code path for
# every notebook, so it runs for the quickest notebook only (01's took 12 s more of a suite
# that must stay inside its 20 minutes); the others' metrics could not all agree between two
# runs of the same parameters anyway: 05 names trials after their run folders, 06 measures
# against the wall-clock, 11's schedule model is fed with op times it measures, 12 times its
# samplers.
RUN_TWICE = ("00_quickstart",)


# Notebooks whose timing claims record what JAX traced or compiled in their timed calls
# (``compiled_while_timed``, ``lab.compile_watch``).
TIMED = {"06_ga3c", "11_interlocking", "12_pixelcnn", "13_parallel_wavenet"}


def timed_regions(tree, where: str = "") -> dict[str, dict | None]:
    """Every ``compiled_while_timed`` record in a run's metrics, by where it stands."""
    found = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key.endswith("compiled_while_timed"):
                parts = value if isinstance(value, dict) and "traces" not in value else {"": value}
                found |= {f"{where}/{key}/{k}": v for k, v in parts.items()}
            else:
                found |= timed_regions(value, f"{where}/{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found |= timed_regions(value, f"{where}[{i}]")
    return found


def untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "seconds" not in k}


@pytest.mark.slow
@pytest.mark.parametrize("path", RUN_HERE, ids=lambda p: p.stem)
def test_notebook_runs_alike_through_the_runner_and_plain_papermill(path, tmp_path):
    """One run through the runner; then, for the notebooks in RUN_TWICE, one under plain
    papermill (which records its metrics only because LAB_RUN_DIR is set): the same notebook,
    parameters and seed give the same metrics, wall-clock timings aside."""
    first = run_notebook(path, SMOKE[path.stem], out=tmp_path / "reports", progress=False)
    assert first.status == "ok", first.error
    assert HEADLINE[path.stem] <= set(first.metrics)
    m = first.metrics  # what the reports lead with, declared by the notebook
    assert m["study"]["measured"] and m["headline"] and set(m["headline"]) <= set(m)
    names = [c["name"] for c in m["claims"]]
    assert bool(names) == (path.stem not in NO_CLAIMS), names
    declared = getattr(experiment_module(path), "CLAIMS", {})
    assert set(names) <= set(declared), f"undeclared claims {set(names) - set(declared)}"
    assert all(c["verdict"] in VERDICTS for c in m["claims"])
    assert mismatches(m["claims"]) == []  # the shared rule gives the recorded verdicts
    html = first.report.read_text()
    assert "status-ok" in html and "data:image/png" in html
    assert ('<table class="claims">' in html) == bool(names)
    if path.stem == "13_parallel_wavenet":  # playable samples, embedded in the report
        assert html.count("data:audio/wav;base64") >= 3
    watched = timed_regions(m)  # what JAX did inside the timed calls: nothing
    assert bool(watched) == (path.stem in TIMED), sorted(watched)
    assert all(seen is not None and not (seen["traces"] or seen["lowerings"] or seen["compiles"])
               for seen in watched.values()), watched

    if path.stem not in RUN_TWICE:
        return
    papermill_dir = tmp_path / "papermill"
    papermill_dir.mkdir()
    out = papermill_dir / path.name
    args = ["-y", json.dumps(SMOKE[path.stem])]  # JSON is YAML: lists keep their type
    plain = subprocess.run(
        [sys.executable, "-m", "papermill", str(path), str(out), "--cwd", str(papermill_dir),
         *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, RUN_DIR_ENV: str(papermill_dir)})
    assert plain.returncode == 0, plain.stderr[-2000:]
    executed = nbformat.read(out, as_version=4)
    assert any(cell.get("outputs") for cell in executed.cells)
    assert untimed(first.metrics) == untimed(read_metrics(papermill_dir))


def refused_before_any_kernel(notebook: str, params: list[str], message: str, tmp_path,
                              capsys) -> None:
    """``lab run notebook params`` exits with status 2 and one line naming ``message``,
    and writes nothing."""
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / notebook), *params, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("params, message", [
    (["-p", "epochs", "-3"], "00_quickstart.ipynb: epochs must be at least 1, got -3"),
    (["-p", "dataset", "mnistt"], "00_quickstart.ipynb: unknown dataset 'mnistt'; choose one"),
    (["-p", "lr", "0"], "00_quickstart.ipynb: lr must be positive, got 0.0"),
])
def test_quickstart_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / "notebooks/00_quickstart.ipynb"), *params,
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
    assert not out.exists()


@pytest.mark.slow
def test_quickstart_trains_on_real_images_offline(tmp_path):
    params = SMOKE["00_quickstart"] | {"dataset": "mnist_5k", "epochs": 5}
    result = run_notebook(ROOT / "notebooks/00_quickstart.ipynb", params, out=tmp_path,
                          progress=False)
    assert result.status == "ok", result.error
    assert result.metrics["test_accuracy"] > 0.5  # 5 epochs of 4,000 digits; chance is 0.1


@pytest.mark.parametrize("name, value, message", [
    ("tau", "0", "01_proxprop.ipynb: ProxProp tau must be a positive number, got 0.0"),
    ("solver", "newton", "01_proxprop.ipynb: unknown ProxProp solver 'newton'"),
])
def test_proxprop_bad_values_fail_before_any_kernel_starts(tmp_path, name, value, message,
                                                           capsys):
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / "notebooks/01_proxprop.ipynb"), "-p", name, value,
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
    assert not out.exists()


@pytest.mark.parametrize("params, message", [
    (["-p", "method", "es", "-p", "population", "7"], "ES population must be even"),
    (["-p", "steps", "0"], "steps (the meta-training episode length) must be at least 1"),
    (["-p", "inputs", "0"], "inputs must be at least 1"),
    (["-p", "theta", "pretrained"], "theta must be one of train, shipped"),
    (["-p", "method", "es", "-p", "devices", "2"], "asked for 2 devices but there are 1"),
    (["-p", "rand_proj", "2"], "rand_proj (2) is the number of fixed projections"),
])
def test_vsml_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / "notebooks/02_vsml.ipynb"), *params, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("params, message", [
    (["-p", "env", "dmc:cartpole_balance"], "unknown DMC task 'cartpole_balance'"),
    (["-p", "env", "acrobot"], "unknown env 'acrobot'"),
    (["-p", "image_size", "12"], "image_size 12 is too small"),
    (["-p", "batch_size", "600"], "batch size 600 is larger than the 500 transitions"),
    (["-p", "steps", "1200"], "steps (1200) must be a multiple of eval_every (500)"),
    (["-p", "variants", "[\"decoder\"]"], "variants must be a non-empty list"),
    (["-p", "devices", "2"], "asked for 2 devices but there are 1 (cpu); on CPU, simulate"),
])
def test_sac_ae_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / "notebooks/03_sac_ae.ipynb"), *params, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("params, message", [
    (["-p", "env", "CartPole-v1"], "CartPole-v1 has a Discrete action space"),
    (["-p", "env", "Acrobot"], "unknown gymnax environment 'Acrobot'"),
    (["-p", "depth", "-1"], "depth must be >= 0"),
    (["-p", "agent", "sarsa"], "agent must be one of mpo, vmpo, search"),
    (["-p", "agent", "search", "-p", "model", "none"], "agent 'search' needs model"),
    (["-p", "total_steps", "1200"], "total_steps (1200) must be a multiple of eval_every"),
    (["-p", "env", "dmc:cartpole_swingup", "-p", "compare", "False"], "MuJoCo cannot"),
    (["-p", "discount", "1.5"], "discount must be in (0, 1], got 1.5"),
    (["-p", "learning_rate", "0"], "learning_rate must be positive"),
    (["-p", "devices", "0"], "devices must be at least 1, got 0"),
])
def test_policy_improvement_bad_values_fail_before_any_kernel_starts(tmp_path, params, message,
                                                                     capsys):
    refused_before_any_kernel("notebooks/04_policy_improvement.ipynb", params, message, tmp_path,
                              capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "survival", "0"], "survival must be in (0, 1], got 0"),
    (["-p", "total_steps", "1000"], "total_steps (1000) must be a multiple of phases x"),
    (["-p", "space", "{'lr': {'type': 'uniform', 'low': 0, 'high': 1}}"],
     "space names unknown parameter(s) lr of 04_policy_improvement.ipynb"),
])
def test_sweep_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    from lab.cli import main

    out = tmp_path / "reports"
    assert main(["run", str(ROOT / "notebooks/05_sweeps.ipynb"), *params,
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: 05_sweeps.ipynb: {message}")
    assert not out.exists()


@pytest.mark.parametrize("params, message", [
    (["-p", "length", "100"], "length 100 does not divide over 8 devices; use a multiple of 8"),
    (["-p", "tensor_devices", "3"], "4 heads do not divide over 3 tensor-parallel devices"),
    (["-p", "devices", "12"], "devices must be a power of two"),
])
def test_sequence_parallel_bad_values_fail_before_any_kernel_starts(tmp_path, params, message,
                                                                    capsys):
    refused_before_any_kernel("notebooks/09_sequence_parallel.ipynb", params, message, tmp_path,
                              capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "searchers", '["annealing"]'], "unknown searcher 'annealing'; choose from greedy"),
    (["-p", "model_devices", "3"], "model_devices 3 does not divide the 8 devices"),
    (["-p", "axes", '["pipeline"]'], "unknown mesh axis 'pipeline' in axes"),
])
def test_automap_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    refused_before_any_kernel("notebooks/10_automap.ipynb", params, message, tmp_path,
                              capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "rules", '["global", "5-wise"]'], "n = 5 is outside 1 ... 4 (the number of "
                                              "components)"),
    (["-p", "rules", '["backprop"]'], "unknown rule 'backprop'; use global, local, pairwise"),
    (["-p", "tasks", '["audio"]'], "unknown task 'audio'; choose from images, text"),
    (["-p", "image_steps", "75"], "image_steps 75 must be a positive multiple of eval_every 50"),
    (["-p", "text_lr_grid", "[0.003]"], "text_lr_grid [0.003] must be [] (every rule uses "
                                        "text_lr) or at least 3 different positive step sizes"),
    (["-p", "head_blocks", "-1"], "head_blocks must be at least 0"),
])
def test_interlocking_bad_values_fail_before_any_kernel_starts(tmp_path, params, message,
                                                               capsys):
    refused_before_any_kernel("notebooks/11_interlocking.ipynb", params, message, tmp_path,
                              capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "base", "3"], "image size 32 is not the base size 3 times a power of 2"),
    (["-p", "timing_sizes", "[16, 48]"], "image size 48 is not the base size 4 times a power"),
    (["-p", "levels", "16"], "levels 16 is not a bit depth the models are built for; use 2"),
    (["-p", "dataset", "cifar10"], "unknown dataset 'cifar10'; choose one of fashion_mnist"),
    (["-p", "models", '["pixelrnn"]'], "unknown model 'pixelrnn'; choose from sequential"),
])
def test_pixelcnn_bad_values_fail_before_any_kernel_starts(tmp_path, params, message, capsys):
    refused_before_any_kernel("notebooks/12_pixelcnn.ipynb", params, message, tmp_path, capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "sample_rate", "22050"], "sample_rate 22050 is not one the speech data is made at"),
    (["-p", "bands", "128"], "bands 128 leaves 6 mel filters empty at 8000 Hz"),
    (["-p", "sentences", "[]"], "the sentence list is empty; give at least one sentence"),
    (["-p", "variants", '["student", "teacher"]'], "unknown variant 'teacher'; choose from"),
])
def test_parallel_wavenet_bad_values_fail_before_any_kernel_starts(tmp_path, params, message,
                                                                  capsys):
    refused_before_any_kernel("notebooks/13_parallel_wavenet.ipynb", params, message,
                              tmp_path, capsys)


@pytest.mark.parametrize("params, message", [
    (["-p", "lam", "-1"], "lambda must be at least 0, got -1.0; use 0 for the validation"),
    (["-p", "nodes", "[4, 30]"], "nodes [4, 30] must be graph sizes from 2 to 12"),
    (["-p", "mechanisms", '["cubic"]'], "mechanisms ['cubic'] must be a non-empty list of"),
])
def test_causal_selection_bad_values_fail_before_any_kernel_starts(tmp_path, params, message,
                                                                   capsys):
    refused_before_any_kernel("notebooks/14_causal_selection.ipynb", params, message,
                              tmp_path, capsys)
