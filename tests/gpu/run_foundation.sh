#!/usr/bin/env bash
# GPU checks for the foundation: info, GPU tests, the collectives suite. Writes to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m commbench info > "$OUT/info.txt" 2>&1; python3 -m commbench info --json > "$OUT/info.json" 2>&1
python3 -m pytest -q tests/gpu/test_collectives_gpu.py 2>&1 | tail -30 | tee "$OUT/gpu-tests.txt"
python3 -m commbench run suites/collectives.yaml --out /tmp/run-collectives --quiet 2>&1 | tail -40
cp /tmp/run-collectives/results.csv "$OUT/collectives-results.csv"
cp /tmp/run-collectives/run.json "$OUT/collectives-run.json"
tar czf "$OUT/collectives-run.tgz" -C /tmp run-collectives
