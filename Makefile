# Quickstart: `make demo` runs the CPU quickstart suite; `make test` runs the fast tests, `make test-all` all.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch's CPU build: a plain `pip install torch` pulls the multi-GB CUDA build (cuDNN, cuBLAS,
# NCCL, NVSHMEM, triton). Without that index (no network), the torch pip finds otherwise.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_FALLBACK := torch==2.13.0

.PHONY: demo test test-slow test-all lint system-deps venv clean cluster-deps slurm-deps

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --retries 1 --timeout 20 --index-url $(TORCH_CPU_INDEX) torch \
		|| $(BIN)/pip install -q "$(TORCH_FALLBACK)"
	# NVSHMEM headers and device libraries (no GPU needed) so CI compiles the NVSHMEM kernels for sm_90
	$(BIN)/pip install -q "nvidia-nvshmem-cu13==3.4.5" || echo "nvidia-nvshmem-cu13 unavailable: NVSHMEM compile tests will skip"
	# Triton: its CPU interpreter runs our fused MoE kernel in the unit tests (no GPU needed)
	$(BIN)/pip install -q "triton==3.6.0" || echo "triton unavailable: the fused kernel's interpreter test will skip"
	# torch is there already, so the torch extra downloads nothing more
	$(BIN)/pip install -q -e '.[torch,mpi,test]'
	touch $(STAMP)

venv: $(STAMP)

# The last lines say how to reach commbench afterwards: it is in .venv, not on PATH.
demo: $(STAMP)
	@echo "$(BIN)/commbench run suites/quickstart.yaml"; \
	$(BIN)/commbench run suites/quickstart.yaml; status=$$?; \
	echo; echo "commbench is installed in $(VENV), not on your PATH. Either activate it in this shell:"; \
	echo "    . $(BIN)/activate        (then: commbench --help)"; \
	echo "or call it by its path:  $(BIN)/commbench --help"; \
	exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .

# Two test targets (markers in pyproject.toml; -rs: every skipped test says why):
#   make test      ruff, then every test that needs no real launch, Slurm, network namespace, browser,
#                  GPU, NVSHMEM link or fresh venv: the logic, in a few minutes on 2 cores
#   make test-all  make test, then test-slow: the tests it left out (real MPI launches, tests/slurm,
#                  tests/cluster, Chromium, the GPU tests, NVSHMEM links, the fresh-venv install)
SLOW_TESTS := mpi or slurm or cluster or browser or gpu or slow or install
test: lint
	$(BIN)/python -m pytest -q -rs -m "not ($(SLOW_TESTS))" tests

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -rs -m "$(SLOW_TESTS)" tests

test-all: test test-slow

# A real single-node Slurm for tests/slurm (Debian: root and apt). libpmix-dev gives srun a working
# PMIx; the tests also run a Slurm without it, as Debian's default is.
slurm-deps:
	if command -v slurmd >/dev/null && command -v munged >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge libpmix-dev \
		|| { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			slurm-wlm munge libpmix-dev; }; \
	else echo "slurm-deps: needs root and apt-get; tests/slurm will skip"; fi

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
