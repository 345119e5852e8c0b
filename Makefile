# Two commands on a fresh clone: `make reports` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# how many of the slowest tests `make test` lists (`DURATIONS=0 make test`: every one)
DURATIONS ?= 20
# Rebuilt whenever the project's dependencies change. uv installs them (the same versions pip
# resolves, 11 s against pip's 96 s from an empty cache here); pip where uv cannot. uv writes
# no bytecode unless asked, and where PYTHONDONTWRITEBYTECODE is set (as on this VM) Python never
# writes it either: then every process, each notebook's kernel included, compiles jax, numpy
# and matplotlib from source again (5.4 s against 2.2 s of CPU for `import jax, equinox,
# matplotlib.pyplot`; the suite 23 min against 18 min with bytecode). --compile-bytecode: 23 s
# more once, at install.
SETUP := $(VENV)/.setup-done

.PHONY: setup reports test test-fast lab lint clean-reports sweep-demo

$(SETUP): pyproject.toml scripts/system_deps.sh
	scripts/system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet uv || echo "uv could not be installed: pip installs instead"
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev,dmc,atari]' \
		|| $(PY) -m pip install --quiet -e '.[dev,dmc,atari]'
	$(PY) -m ipykernel install --sys-prefix --name lab --display-name "Python (lab)"
	touch $@

# JupyterLab's settings defaults for this environment (jupyter/overrides.json): no "get
# notified about official Jupyter news?" pop-up, no update checks (no internet here).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

$(LAB_SETTINGS): jupyter/overrides.json $(SETUP)
	mkdir -p $(dir $@)
	cp jupyter/overrides.json $@

setup: $(SETUP) $(LAB_SETTINGS)

## Import the recorded claim-scale and GPU runs (results/: their metrics.json and
## provenance.json), then run every notebook in notebooks/ with its default parameters into
## reports/; a notebook whose inputs are unchanged since its last ok run is reused.
## `make reports FORCE=1` runs all; `make reports JOBS=N` runs N notebooks at once.
## (a folder with no metrics.json is a stopped run's partial.json, kept for its figures)
RECORDED := $(patsubst %/metrics.json,%,$(wildcard results/*/metrics.json))
reports: $(SETUP)
	$(if $(RECORDED),$(PY) -m lab import $(RECORDED) --out reports)
	$(PY) -m lab run --all --out reports $(if $(FORCE),--force) $(if $(JOBS),--jobs $(JOBS))

## A small HyperTrick sweep end to end on this machine (sweeps/mpo_pendulum.yaml, 2 workers):
## trials under reports/sweeps/<name>/runs, the sweep's page at reports/sweeps/<name>.html.
## The study's name must be new: `make clean-reports` removes the earlier demo.
sweep-demo: $(SETUP)
	$(PY) -m lab sweep run sweeps/mpo_pendulum.yaml --out reports

## The whole test suite, in parallel; notebooks run with smoke parameters.
test: $(SETUP) $(LAB_SETTINGS)
	$(VENV)/bin/ruff check lab tests benchmarks
	$(PY) -m pytest -n auto --dist worksteal --durations=$(DURATIONS)

## Everything but the end-to-end notebook runs.
test-fast: $(SETUP)
	$(PY) -m pytest -n auto -m "not slow"

## JupyterLab on 127.0.0.1 with the project's kernel ("Python (lab)").
lab: $(SETUP) $(LAB_SETTINGS)
	$(VENV)/bin/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir .

lint: $(SETUP)
	$(VENV)/bin/ruff check lab tests benchmarks

clean-reports:
	rm -rf reports/runs reports/*.html reports/sweeps reports/reused.json
