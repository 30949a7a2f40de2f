#!/usr/bin/env bash
# Proxy family on one GPU: build the native library, run the GPU tests (numbers
# as JSON lines), then a small proxy suite through the runner. Everything lands
# in $OUT (at most 8 files).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/commbench-jit
OUT=${OUT:-/tmp/proxy-out}
mkdir -p "$OUT"
export PROXY_GPU_OUT="$OUT/proxy_gpu.jsonl"
TT=${TT:-75} TS=${TS:-70}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  nproc
  echo "== build"
  time python3 -c "from commbench.families.proxy import native; native.library(); print('built')"
  echo "== GPU tests"
  timeout "$TT" python3 -m pytest -s -q -p no:cacheprovider tests/gpu/test_proxy_gpu.py
  echo "rc=$?"
  cat > /tmp/proxy-gpu.yaml <<'YAML'
name: proxy-gpu-smoke
defaults: {warmup: 3, iters: 20, timeout_s: 65, ranks: 1}
benchmarks:
  - name: delivery-latency
    family: proxy
    op: latency
    backends: [proxy]
    sizes: [8B]
    warmup: 200
    iters: 10000
    params: {executor: none}
  - name: transfer-latency
    family: proxy
    op: latency
    backends: [proxy, direct]
    sizes: [8B, 64KiB]
    warmup: 20
    iters: 300
    params: {executor: [device, host, peer]}
  - name: delivery-rate
    family: proxy
    op: rate
    backends: [proxy]
    sizes: [8B]
    warmup: 2
    iters: 10
    params: {executor: none, proxy_threads: [1, 4, 8], num_ctas: [1, 132], warps_per_cta: 4,
             batch: 32, cmds_per_producer: 512}
  - name: copy-rate
    family: proxy
    op: rate
    backends: [proxy, direct]
    sizes: [4KiB]
    warmup: 2
    iters: 10
    params: {executor: device, proxy_threads: 4, num_ctas: 8, warps_per_cta: 4, cmds_per_producer: 128}
  - name: proxy-bandwidth
    family: proxy
    op: bandwidth
    backends: [proxy]
    sizes: [4KiB, 1MiB, 16MiB, 256MiB]
    warmup: 2
    iters: 10
    params: {executor: [device, host], proxy_threads: 4, num_ctas: 4, warps_per_cta: 4, chunk_bytes: 4194304}
  - name: direct-bandwidth
    family: proxy
    op: bandwidth
    backends: [direct]
    sizes: [4KiB, 1MiB, 16MiB, 256MiB]
    warmup: 2
    iters: 10
    params: {executor: [device, host], num_ctas: 132, warps_per_cta: 16, chunk_bytes: 65536}
  - name: stalled-proxy
    family: proxy
    op: rate
    backends: [proxy]
    sizes: [8B]
    warmup: 0
    iters: 1
    params: {executor: none, inject_stall_after: 100, timeout_ms: 200, num_ctas: 2, warps_per_cta: 2}
YAML
  echo "== suite through the runner"
  timeout "$TS" python3 -m commbench run /tmp/proxy-gpu.yaml --out /tmp/proxy-run --quiet
  echo "rc=$?"
  cp /tmp/proxy-run/results.csv "$OUT/suite_results.csv" 2>/dev/null
  cat /tmp/proxy-run/logs/*.log > "$OUT/suite_logs.txt" 2>/dev/null
  python3 - <<'PY'
import pandas as pd
df = pd.read_csv("/tmp/proxy-run/results.csv")
cols = [c for c in ["bench", "op", "backend", "executor", "size_bytes", "proxy_threads", "num_ctas",
                    "time_us", "latency_p50_us", "latency_p99_us", "rate_mops", "algbw_gbps",
                    "wrong", "status", "reason"] if c in df.columns]
pd.set_option("display.width", 250); pd.set_option("display.max_rows", 200)
pd.set_option("display.max_colwidth", 60)
print(df[cols].to_string())
PY
} 2>&1 | tee "$OUT/proxy_gpu.log"
