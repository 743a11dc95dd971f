# Two commands from a fresh clone: `make run` and `make test`. Both create/update .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint bench eval-dev dagster serve clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

run: $(STAMP)  ## the main job on the embedded defaults, launched through Dagster (runs show in `make dagster`)
	$(VENV)/bin/memory-pipelines run

test: $(STAMP)  ## the whole suite against a real PostgreSQL
	$(PY) -m pytest -q

test-fast: $(STAMP)  ## the suite without the tests marked slow
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check memory_pipelines assets tests bench scripts

eval-dev: $(STAMP)  ## the dev battery: eval over every set in ../shared/bench (or BENCH=DIR), against the committed result
	$(PY) bench/eval_dev.py $(if $(BENCH),--bench $(BENCH)) $(EVAL_DEV_ARGS)

dagster: $(STAMP)  ## the Dagster UI on the instance `make run` records into ($$MEMORY_PIPELINES_HOME/dagster)
	$(PY) -m memory_pipelines.pipelines.dagster_home $(VENV)/bin/dagster dev -w workspace.yaml

serve: $(STAMP)  ## the HTTP API on 127.0.0.1:8000
	$(VENV)/bin/memory-pipelines serve

clean:  ## the venv, the embedded database and the Dagster instance (.dagster_home: its old place)
	rm -rf $(VENV) .memory_pipelines .dagster_home
