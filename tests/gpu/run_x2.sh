#!/usr/bin/env bash
# Two-GPU call (nvidia-h200-x2): the x2 suites, bounded, then a report. Writes $OUT/x2.tgz and $OUT/summary.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
OUT=${OUT:-/tmp/out}; R=/tmp/x2; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; : > "$S"
date -u >> "$S"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$S"
nvidia-smi topo -m >> "$S" 2>&1
timeout 60 python3 -m commbench info --json > "$R/info.json" 2>&1
for s in x2:${T1:-120} x2-algos:${T2:-60}; do
  name=${s%%:*}; t=${s##*:}; t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "tests/gpu/suites/$name.yaml" --out "$R/$name" --quiet > "$R/$name.console.txt" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 30 "$R/$name.console.txt" >> "$S"
done
timeout 40 python3 -m commbench report "$R/x2" "$R/x2-algos" --out "$R/report.html" >> "$S" 2>&1
tar czf "$OUT/x2.tgz" -C /tmp x2
tail -n 3 "$S"
