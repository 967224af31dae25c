# lisa-ext: `make run` sets everything up and runs the quickstart; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test setup system-packages venv bench bench-kernel lock clean

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

# each script prints its figures (medians, ratios); kernel_rebuild and vboard take minutes
bench: setup
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/trace_load.py
	$(BIN)/python bench/analyses.py
	$(BIN)/python bench/report.py

bench-kernel: setup
	$(BIN)/python bench/kernel_rebuild.py
	$(BIN)/python bench/vboard.py

# Re-pin after changing dependencies: resolves fresh and records what was tested.
lock:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^lisa-ext' > constraints.txt
	$(BIN)/python scripts/write-environment-yml.py

clean:
	rm -rf $(VENV) build *.egg-info out
