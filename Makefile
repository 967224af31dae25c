# lisa-ext: `make run` sets everything up and runs the quickstart; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup system-packages venv bench lock clean

run: setup
	$(BIN)/lisa-ext quickstart

test: setup
	$(BIN)/python -m pytest

setup: system-packages venv

system-packages:
	@bash scripts/install-system-packages.sh

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt lisa_ext/trace/_tracedat.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	@touch $@

bench: setup
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/analyses.py

# Re-pin after changing dependencies: resolves fresh and records what was tested.
lock:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^lisa-ext' > constraints.txt
	$(BIN)/python scripts/write-environment-yml.py

clean:
	rm -rf $(VENV) build *.egg-info out
