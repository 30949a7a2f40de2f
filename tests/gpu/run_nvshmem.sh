#!/bin/bash
# nvshmem family on a GPU machine: install carried wheels, build the kernels,
# run the 1-PE GPU tests, then a small suite with 1 and 2 PEs through
# `commbench run` (mpiexec). Everything lands in $OUT (default ./nvshmem-gpu-out).
set -u
OUT=${OUT:-$PWD/nvshmem-gpu-out}
mkdir -p "$OUT"
# Site safety switches: never unset, also inherited by every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/commbench-jit
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/machine.txt" 2>&1
python3 -c "from commbench.families.nvshmem import boot; print(boot.metadata())" >> "$OUT/machine.txt" 2>&1
# Build the three libraries in parallel (device linking is single-threaded and slow).
for lib in nvshmem_boot nvshmem_ops nvshmem_coll; do
  python3 -c "from commbench.families.nvshmem import boot; boot.load_library('$lib')" > "$OUT/build-$lib.log" 2>&1 &
done
wait
cat "$OUT"/build-*.log > "$OUT/build.log"; rm -f "$OUT"/build-*.log
timeout ${PYTEST_TIMEOUT_S:-70} python3 -m pytest -q -rs tests/gpu/test_nvshmem_gpu.py -s > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest.log"
cat > /tmp/nvshmem-gpu.yaml <<'YAML'
name: nvshmem-gpu-small
defaults: {warmup: 3, iters: 10, timeout_s: 60, dtypes: [float32]}
benchmarks:
  - {name: bw, family: nvshmem, ops: [put, get], backends: [nvshmem, nvshmem_host], ranks: [1, 2],
     sizes: [8B, 4KiB, 1MiB, 64MiB, 256MiB], params: {num_ctas: 8, threads: 1024}}
  - {name: rate, family: nvshmem, ops: [p, put_signal], backends: [nvshmem], ranks: [1, 2], sizes: [8B, 4KiB]}
  - {name: amo, family: nvshmem, ops: [atomic_fetch_add], backends: [nvshmem], dtypes: [uint64], ranks: [1, 2], sizes: [4KiB]}
  - {name: lat, family: nvshmem, ops: [put_latency, get_latency, pingpong], backends: [nvshmem], ranks: [1, 2],
     sizes: [8B, 4KiB], params: {threads: 32}}
  - {name: coll, family: nvshmem, ops: [all_reduce, all_gather, alltoall, broadcast, reduce_scatter],
     backends: [nvshmem_host], ranks: [1, 2], sizes: [64KiB, 16MiB]}
  - {name: no-p2p, family: nvshmem, ops: [put], backends: [nvshmem], ranks: 2, sizes: [4KiB],
     env: {NVSHMEM_DISABLE_P2P: "1"}, timeout_s: 30}
  - {name: mpg-coll-probe, family: nvshmem, ops: [all_reduce], backends: [nvshmem_host, nvshmem], ranks: 2,
     sizes: [4KiB], params: {allow_limited_mpg: true}, env: {COMMBENCH_PROBE: "mpg"}, timeout_s: 20}
YAML
timeout ${SUITE_TIMEOUT_S:-100} python3 -m commbench run /tmp/nvshmem-gpu.yaml --out "$OUT/run" --quiet > "$OUT/suite.log" 2>&1
echo "suite rc=$?" >> "$OUT/suite.log"
cat "$OUT"/run/logs/*.log > "$OUT/launch-logs.txt" 2>/dev/null
python3 - "$OUT" <<'PY' > "$OUT/summary.txt" 2>&1
import sys, pandas as pd
df = pd.read_csv(f"{sys.argv[1]}/run/results.csv")
cols = [c for c in ["bench", "op", "backend", "variant", "world_size", "size_bytes", "time_us", "algbw_gbps",
                    "busbw_gbps", "wrong", "status", "transport", "nvshmem_mode", "reason"] if c in df]
pd.set_option("display.width", 250); pd.set_option("display.max_rows", 500); pd.set_option("display.max_colwidth", 90)
print(df[cols].to_string())
PY
tail -c 4000 "$OUT/pytest.log"; cat "$OUT/summary.txt"
