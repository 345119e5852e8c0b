import pytest

from lab.experiments.params import ParameterError, notebook_parameters, resolve, with_preset
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
    merged, overrides = resolve(notebook, {"epochs": "7", "lr": "1e-3", "verbose": "true",
                                           "sizes": "[1, 2, 3]", "name": "iris", "extra": "5"})
    assert overrides == {"epochs": 7, "lr": 0.001, "verbose": True, "sizes": [1, 2, 3],
                         "name": "iris", "extra": 5}
    assert merged["epochs"] == 7 and isinstance(merged["lr"], float)


def test_resolve_accepts_python_values_and_ints_for_floats(notebook):
    _, overrides = resolve(notebook, {"lr": 1, "epochs": 2})
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
    assert resolve(path, {}) == ({}, {})
    with pytest.raises(ParameterError, match="no cell tagged 'parameters'"):
        resolve(path, {"x": "2"})


def test_with_preset_puts_the_named_preset_on_top_and_refuses_unknown_ones():
    presets = {"default": {}, "claim": {"steps": 3000}}
    assert with_preset({"steps": 10, "seed": 0}, presets) == {"steps": 10, "seed": 0}
    assert with_preset({"preset": "claim", "steps": 10}, presets) == {"preset": "claim",
                                                                     "steps": 3000}
    with pytest.raises(ValueError, match="^unknown preset 'huge'; choose one of default, claim$"):
        with_preset({"preset": "huge"}, presets)
