#!/usr/bin/env bash
# One GPU session for the allreduce family: build the kernels, run the GPU tests
# (several ranks sharing the GPU), a small suite through `commbench run`, and
# keep logs, rows and NCCL's real TUNING logs under $OUT (default ./gpu-out).
# Multicast stays off: the kill switches are set here and forwarded to every rank.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/cb-allreduce.XXXXXX)
export COMMBENCH_GPU_OUT=$WORK/gpu COMMBENCH_JIT_CACHE=$WORK/jit PYTHONPATH=$PWD
LOG=$OUT/allreduce-gpu.log

{
  date -u
  nvidia-smi -L
  python3 - <<'PY'
import torch, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", ".".join(map(str, torch.cuda.nccl.version())))
from commbench.families.allreduce import gate
print("multicast attribute (device 0):", gate.device_supports_multicast(0))
PY
  echo "== build kernels/allreduce.cu"
  timeout 120 python3 -c "import time; t=time.time(); from commbench import jit; print(jit.build('allreduce')); print('build_s %.1f' % (time.time()-t))"
  echo "== GPU tests"
  timeout 125 python3 -m pytest -v -rs -p no:cacheprovider tests/gpu/test_allreduce_gpu.py
  echo "pytest exit: $?"
} 2>&1 | tee "$LOG"

cat "$COMMBENCH_GPU_OUT"/rows-*.jsonl > "$OUT/allreduce-rows.jsonl" 2>/dev/null
for tag in auto Ring; do
  cat "$COMMBENCH_GPU_OUT"/logs-nccl-$tag/nccl/*.log > "$OUT/h200-1rank-$tag.log" 2>/dev/null
done
tar czf "$OUT/driver-logs.tgz" -C "$COMMBENCH_GPU_OUT" . 2>/dev/null

# The same family through the project's runner (rows in results.csv), if time is left.
cat > "$WORK/smoke.yaml" <<'YAML'
name: allreduce-gpu-smoke
defaults: {warmup: 2, iters: 5, timeout_s: 60, dtypes: [bfloat16]}
benchmarks:
  - name: own-kernels
    family: allreduce
    backends: [cb_one_shot, cb_two_shot, torch_one_shot, torch_two_shot]
    sizes: [4KiB, 1MiB]
    ranks: 2
  - name: nccl
    family: allreduce
    backends: [nccl, nccl_symm]
    sizes: [8B, 1MiB, 64MiB]
    ranks: 1
    env: {NCCL_ALGO: [Ring, NVLS]}
  - name: multimem
    family: allreduce
    backends: [torch_multimem]
    sizes: [1MiB]
    ranks: 2
    params: {allow_multicast: true}
YAML
{
  echo "== commbench run (smoke suite)"
  timeout 45 python3 -m commbench run "$WORK/smoke.yaml" --out "$WORK/run" --quiet
  echo "commbench run exit: $?"
  python3 -c "import pandas as pd; pd.set_option('display.width', 250); d = pd.read_csv('$WORK/run/results.csv'); print(d[[c for c in ['backend','variant','dtype','size_bytes','world_size','time_us','busbw_gbps','wrong','status','reason','nccl_algo','nccl_proto','nccl_algo_honoured'] if c in d]].to_string())"
} 2>&1 | tee -a "$LOG"
cp "$WORK/run/results.csv" "$OUT/smoke-results.csv" 2>/dev/null
tar czf "$OUT/smoke-run.tgz" -C "$WORK" run 2>/dev/null
exit 0
