# lisa-ext: `make run` sets everything up and runs the quickstart; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-studies test-arm64 test-bisect setup system-packages venv bench bench-kernel fuzz lab lock clean

run: setup
	$(BIN)/lisa-ext quickstart

# the baseline kernel first, then the boards (x86, a second x86, arm64) and the host's tests side by side
# (scripts/run-tests.sh)
test: setup
	@bash scripts/run-tests.sh

# only the studies at smoke size on the x86 virtual board (make test runs them too; ~40 min)
test-studies: setup
	$(BIN)/python -m pytest tests/test_studies_smoke.py

# only the arm64 board's tests (marker arm64; make test runs them too): ~15 min from nothing
# (kernel cross-build 7, tests 7)
test-arm64: setup
	$(BIN)/python -m pytest -m arm64

# only the bisect board test (make test runs it too): ~8 min with its ends' kernels built
test-bisect: setup
	$(BIN)/python -m pytest tests/test_bisect_board.py

setup: system-packages venv

system-packages:
	@bash scripts/install-system-packages.sh

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt lisa_ext/trace/_tracedat.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	@# setuptools says "Editable installation" on every editable build, as a 10-line warning: not news
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	@touch $@

# each script prints its figures (medians, ratios); kernel_rebuild and vboard take minutes
bench: setup
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/trace_load.py
	$(BIN)/python bench/analyses.py
	$(BIN)/python bench/report.py
	$(BIN)/python bench/explore.py
	$(BIN)/python bench/dask_campaign.py

bench-kernel: setup
	$(BIN)/python bench/kernel_rebuild.py
	$(BIN)/python bench/vboard.py
	$(BIN)/python bench/vboard_calibration.py

# fuzz the trace readers under AddressSanitizer + UBSan for FUZZ_SECONDS (tests/fuzz/run.py): findings and
# cases/s in out/fuzz/summary.txt; FUZZ_ARGS=--refresh-corpus rewrites tests/fuzz_corpus/ from the new inputs
FUZZ_SECONDS ?= 600
fuzz: setup
	nice -n 10 $(BIN)/python tests/fuzz/run.py --seconds $(FUZZ_SECONDS) $(FUZZ_ARGS)

# JupyterLab on notebooks/ with this venv registered as the "lisa-ext" kernel the notebooks
# name; listens on 127.0.0.1 only (LAB_PORT=8888 by default) and prints its token URL
LAB_PORT ?= 8888
lab: setup
	$(BIN)/python -m ipykernel install --sys-prefix --name lisa-ext --display-name "Python (lisa-ext)"
	$(BIN)/jupyter lab --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
		--ServerApp.root_dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# Re-pin after changing dependencies: resolves fresh and records what was tested.
lock:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^lisa-ext' > constraints.txt
	$(BIN)/python scripts/write-environment-yml.py

clean:
	rm -rf $(VENV) build *.egg-info out
