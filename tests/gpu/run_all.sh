#!/usr/bin/env bash
# One GPU call for everything: each shipped suite through `commbench run`, each bounded
# (an interrupted run keeps every row measured so far), then one report over all runs.
# Writes $OUT/runs.tgz (all run folders + report), $OUT/summary.txt, $OUT/info.json.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
OUT=${OUT:-/tmp/out}; R=/tmp/runs; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; : > "$S"
date -u >> "$S"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$S"
timeout 60 python3 -m commbench info --json > "$OUT/info.json" 2>&1
# Build every kernel library in parallel first (the steps below would each pay for theirs).
t0=$SECONDS
timeout 240 python3 tests/gpu/prebuild.py >> "$S" 2>&1
echo "== prebuild in $((SECONDS - t0)) s" >> "$S"
step() {  # name seconds suite [run options...]
  local name=$1 t=$2 suite=$3; shift 3; local t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "$@" > "$R/$name.console.txt" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s" >> "$S"
  tail -n 40 "$R/$name.console.txt" >> "$S"
}
step smoke "${T_SMOKE:-45}" tests/gpu/suites/nccl-smoke.yaml
step collectives "${T_COLL:-100}" suites/collectives.yaml
step allreduce "${T_AR:-60}" suites/allreduce-algos.yaml
step nvshmem "${T_SHMEM:-70}" suites/nvshmem.yaml
step proxy "${T_PROXY:-60}" suites/proxy.yaml
step moe-ranks "${T_MOE_RANKS:-120}" tests/gpu/suites/moe-ranks.yaml
step moe "${T_MOE:-90}" suites/moe.yaml --set ranks=1
timeout 60 python3 -m commbench report $(ls -d "$R"/*/) --out "$R/report.html" >> "$S" 2>&1
tar czf "$OUT/runs.tgz" -C /tmp runs
ls -la "$OUT" >> "$S"
tail -n 5 "$S"
