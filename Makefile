# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test setup bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# Sets everything up and runs the main job. Until the broker lands this runs the
# storage benchmark; it becomes `tidelog serve`.
run: $(STAMP)
	$(VENV)/bin/tidelog bench storage

# Sets everything up and runs the whole test suite.
test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/storage_bench.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
