#!/usr/bin/env bash
# MoE GPU checks on one machine: build the kernels, run the family directly
# with 4, 1 and 2 ranks (ranks may share one GPU), then a small suite through
# the runner. Everything lands in $OUT (at most 8 files).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/commbench-jit
OUT=${OUT:-/tmp/moe-out}
mkdir -p "$OUT"
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES
     -x PYTHONPATH -x PYTHONUNBUFFERED -x COMMBENCH_JIT_CACHE)
T1=${T1:-60} T2=${T2:-25} T4=${T4:-45} TS=${TS:-30}
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for k in moe_normal moe_ll moe_ipc; do
    python3 -c "from commbench import jit; print(jit.build('$k'))" &
  done
  wait
  echo "== 4 ranks"; timeout "$T4" "${MPI[@]}" -np 4 python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np4.jsonl"
  echo "rc=$?"
  echo "== 1 rank"; timeout "$T1" "${MPI[@]}" -np 1 python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np1.jsonl"
  echo "rc=$?"
  echo "== 2 ranks"; timeout "$T2" "${MPI[@]}" -np 2 python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np2.jsonl"
  echo "rc=$?"
  cat > /tmp/moe-gpu.yaml <<'YAML'
name: moe-gpu-smoke
defaults: {warmup: 3, iters: 10, timeout_s: 25, ranks: 2}
benchmarks:
  - name: small
    family: moe
    ops: [dispatch, combine]
    backends: [ipc, ipc_ll, nccl_a2a]
    dtypes: [bfloat16]
    sizes: [512KiB]
    params: {hidden: 2048, topk: 4, experts: 16, num_sms: 8}
YAML
  echo "== suite through the runner"
  timeout "$TS" python3 -m commbench run /tmp/moe-gpu.yaml --out /tmp/moe-run --quiet
  echo "rc=$?"
  cp /tmp/moe-run/results.csv "$OUT/suite_results.csv" 2>/dev/null
  cat /tmp/moe-run/logs/*.log > "$OUT/suite_logs.txt" 2>/dev/null
} 2>&1 | tee "$OUT/moe_gpu.log"
