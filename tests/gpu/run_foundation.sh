#!/usr/bin/env bash
# GPU checks for the foundation. Every step is bounded and leaves its output in $OUT as it goes.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SMOKE_S=${SMOKE_S:-150}; FULL_S=${FULL_S:-0}
timeout 60 python3 -m commbench info --json > "$OUT/info.json" 2>&1
timeout "$SMOKE_S" python3 -m commbench run tests/gpu/suites/nccl-smoke.yaml --out "$OUT/smoke" --quiet > "$OUT/smoke.txt" 2>&1
echo "smoke rc=$?" >> "$OUT/smoke.txt"
cat "$OUT"/smoke/logs/launch-*.log "$OUT"/smoke/logs/*.stacks.txt > "$OUT/smoke-logs.txt" 2>/dev/null
if [ "$FULL_S" -gt 0 ] && ! grep -q ",timeout," "$OUT/smoke/results.csv"; then
  timeout "$FULL_S" python3 -m commbench run suites/collectives.yaml --out "$OUT/collectives" --quiet > "$OUT/collectives.txt" 2>&1
  echo "collectives rc=$?" >> "$OUT/collectives.txt"
fi
tail -5 "$OUT/smoke.txt"
