# Two commands from a fresh clone: `make run` and `make test`. Both create/update .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast chromium lint bench eval-dev dagster serve clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

run: $(STAMP)  ## the main job on the embedded defaults, launched through Dagster (runs show in `make dagster`)
	$(VENV)/bin/memory-pipelines run

# Two pytest-xdist workers, each with its own embedded server: the suite's slow tests mostly wait (subprocesses,
# servers, kills), so two share two cores well (507 s against about 800 s in one process).
test: $(STAMP) chromium  ## the whole suite against a real PostgreSQL
	$(PY) -m pytest -q -n 2

# The browser tests drive Debian's Chromium at /usr/bin/chromium through Playwright, which never downloads a
# browser: install it when it is missing (with sudo unless root), or say what to install and stop.
chromium:
	@[ -x /usr/bin/chromium ] || { \
	  echo "make: the browser tests need Chromium at /usr/bin/chromium; installing it (apt-get install chromium)"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
	  if command -v apt-get >/dev/null && $$SUDO apt-get update && $$SUDO apt-get install -y chromium; then :; else \
	    echo "make: could not install Chromium. Install it first (Debian/Ubuntu: sudo apt-get install chromium)" \
	         "and run make test again, or run make test-fast (it leaves out the browser tests)." >&2; exit 1; fi; }

test-fast: $(STAMP)  ## the suite without the tests marked slow
	$(PY) -m pytest -q -n 2 -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check memory_pipelines assets tests bench scripts

eval-dev: $(STAMP)  ## the dev battery: eval over every set in ../shared/bench (or BENCH=DIR), against the committed result
	$(PY) bench/eval_dev.py $(if $(BENCH),--bench $(BENCH)) $(EVAL_DEV_ARGS)

dagster: $(STAMP)  ## the Dagster UI on the instance `make run` records into ($$MEMORY_PIPELINES_HOME/dagster)
	$(PY) -m memory_pipelines.operations.dagster_home $(VENV)/bin/dagster dev -w workspace.yaml $(DAGSTER_ARGS)

serve: $(STAMP)  ## the HTTP API on 127.0.0.1:8000
	$(VENV)/bin/memory-pipelines serve

clean:  ## the venv, the embedded database and the Dagster instance (.dagster_home: its old place)
	rm -rf $(VENV) .memory_pipelines .dagster_home
