import pytest

import lab.runs.params as params_module
from lab.runs.params import (
    ParameterError,
    effective,
    notebook_parameters,
    resolve,
    resolved,
    with_preset,
)
from tests.conftest import write_notebook

PARAMS = """name = "digits"  # which data set
epochs = 3
lr = 0.1
verbose = False
sizes = [4, 8]
extra = None"""


@pytest.fixture
def notebook(tmp_path):
    return write_notebook(tmp_path / "nb.ipynb", PARAMS, "print(name)")


def test_notebook_parameters_reads_defaults_in_order(notebook):
    params = notebook_parameters(notebook)
    assert list(params) == ["name", "epochs", "lr", "verbose", "sizes", "extra"]
    assert params["epochs"].default == 3 and params["sizes"].default == [4, 8]
    assert params["lr"].type_name == "float"


def test_resolve_converts_strings_to_the_default_type(notebook):
    merged, overrides, *_ = resolve(notebook, {"epochs": "7", "lr": "1e-3", "verbose": "true",
                                               "sizes": "[1, 2, 3]", "name": "iris",
                                               "extra": "5"})
    assert overrides == {"epochs": 7, "lr": 0.001, "verbose": True, "sizes": [1, 2, 3],
                         "name": "iris", "extra": 5}
    assert merged["epochs"] == 7 and isinstance(merged["lr"], float)


def test_resolve_accepts_python_values_and_ints_for_floats(notebook):
    _, overrides, *_ = resolve(notebook, {"lr": 1, "epochs": 2})
    assert overrides == {"lr": 1.0, "epochs": 2} and isinstance(overrides["lr"], float)


def test_resolve_unknown_name_lists_valid_names(notebook):
    with pytest.raises(ParameterError) as err:
        resolve(notebook, {"nope": "1"})
    message = str(err.value)
    assert "'nope'" in message and "name, epochs, lr, verbose, sizes, extra" in message
    assert "\n" not in message


@pytest.mark.parametrize("name, value, expected", [
    ("epochs", "abc", "int"), ("epochs", "2.5", "int"), ("lr", "fast", "float"),
    ("verbose", "maybe", "bool"), ("sizes", "3", "list"), ("epochs", True, "int"),
])
def test_resolve_wrong_type_names_the_expected_type(notebook, name, value, expected):
    with pytest.raises(ParameterError, match=f"{name!r} expects {expected}, got"):
        resolve(notebook, {name: value})


def test_resolve_without_parameters_cell_refuses_overrides(tmp_path):
    path = tmp_path / "plain.ipynb"
    write_notebook(path, "x = 1")
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, path)
    assert resolve(path, {}) == ({}, {}, {}, {})
    with pytest.raises(ParameterError, match="no cell tagged 'parameters'"):
        resolve(path, {"x": "2"})


def test_resolve_takes_raw_strings_as_they_are(notebook):
    values, explicit, sources, _ = resolve(notebook, {}, raw={"name": "0.5", "extra": "[1]"})
    assert explicit == {"name": "0.5", "extra": "[1]"} and values["name"] == "0.5"
    assert sources["name"] == sources["extra"] == "explicit" and sources["lr"] == "default"
    with pytest.raises(ParameterError, match=r"^parameter 'epochs' expects int, got '5' "
                       r"\(-r passes a raw string; use -p\)$"):
        resolve(notebook, {}, raw={"epochs": "5"})


def test_effective_is_default_then_preset_then_explicit():
    defaults = {"preset": "default", "steps": 10, "width": 2, "seed": 0}
    presets = {"default": {}, "big": {"steps": 500, "width": 64}}
    values, sources = effective(defaults, presets, {"preset": "big", "steps": 10})
    # an explicit value equal to the notebook's default still beats the preset
    assert values == {"preset": "big", "steps": 10, "width": 64, "seed": 0}
    assert sources == {"preset": "explicit", "steps": "explicit", "width": "preset big",
                       "seed": "default"}
    assert effective(defaults, presets, {}) == (defaults, dict.fromkeys(defaults, "default"))
    with pytest.raises(ParameterError, match="^unknown preset 'huge'; choose one of default, "
                       "big$"):
        effective(defaults, presets, {"preset": "huge"})
    with pytest.raises(ParameterError, match="preset 'odd' sets 'depth', which is not a "
                       "notebook parameter"):
        effective(defaults, presets | {"odd": {"depth": 3}}, {"preset": "odd"})


def test_with_preset_puts_the_named_preset_on_top_and_refuses_unknown_ones(capsys):
    presets = {"default": {}, "claim": {"steps": 3000}}
    assert with_preset({"steps": 10, "seed": 0}, presets) == {"steps": 10, "seed": 0}
    assert with_preset({"preset": "claim", "steps": 10}, presets) == {"preset": "claim",
                                                                     "steps": 3000}
    assert "preset 'claim' set steps=3000 (was 10)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="^unknown preset 'huge'; choose one of default, claim$"):
        with_preset({"preset": "huge"}, presets)


def test_with_preset_leaves_the_values_the_runner_resolved(monkeypatch):
    monkeypatch.setattr(params_module, "_resolved", None)
    presets = {"default": {}, "claim": {"steps": 3000, "width": 64}}
    mine = {"preset": "claim", "steps": 10, "width": 64, "seed": 0}
    resolved({"preset": "claim", "steps": 10, "width": 64})  # what the injected cell says
    assert with_preset(mine, presets) == mine
    # another configure in the same kernel (other names, or other values) gets its preset
    assert with_preset({"preset": "claim", "steps": 10}, presets)["steps"] == 3000
    assert with_preset(mine | {"width": 8}, presets)["steps"] == 3000
    resolved(None)
    assert with_preset(mine, presets)["steps"] == 3000


def _preset_cases():
    """(notebook, preset) for every preset but "default" of every notebook in notebooks/."""
    from lab.runs.params import notebook_presets
    from tests.conftest import ROOT

    return [(path, name) for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
            for name in notebook_presets(path) if name != "default"]


@pytest.mark.parametrize("path, preset", _preset_cases(),
                         ids=lambda v: getattr(v, "stem", v))
def test_every_preset_yields_to_an_explicit_value_and_the_record_says_so(path, preset,
                                                                          tmp_path):
    """``-p preset P -p X V`` with X one of P's names and V the notebook's own default (an
    explicit value equal to the default is the hard case): X == V, the rest of P applied, and
    the prepared record gives each value's source."""
    import json

    from lab.runs.params import notebook_presets
    from lab.runs.runner import write_prepared

    chosen = notebook_presets(path)[preset]
    defaults = {k: p.default for k, p in notebook_parameters(path).items()}
    refused = []
    for name in [k for k in chosen if chosen[k] != defaults[k]]:  # the first V that validates
        try:
            resolution = resolve(path, {"preset": preset, name: repr(defaults[name])})
            break
        except ParameterError as err:
            refused.append(str(err))
    else:
        pytest.fail(f"no value of preset {preset!r} could be set back explicitly: {refused}")
    values, explicit, sources, _ = resolution
    assert values[name] == defaults[name] and sources[name] == "explicit"
    for other, value in chosen.items():
        if other != name:
            assert values[other] == value and sources[other] == f"preset {preset}"
    record = json.loads(write_prepared(path, resolution, tmp_path)
                        .with_suffix(".parameters.json").read_text())
    assert record["parameters"][name] == defaults[name] and record["preset"] == preset
    assert record["parameter_sources"] == sources and record["overrides"] == explicit
