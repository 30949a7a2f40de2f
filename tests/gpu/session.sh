#!/usr/bin/env bash
# The one GPU session of commbench: every GPU check, each step bounded (a step that runs out of
# time is killed; a `commbench run` keeps every row measured so far), results under $OUT.
#
#   bash tests/gpu/session.sh                   # build tests families suites (+ x2 on 2+ GPUs)
#   bash tests/gpu/session.sh build tests       # only the named groups, in the order given
#
# Groups:
#   build     every kernel library in parallel (tests/gpu/prebuild.py), cached in $COMMBENCH_JIT_CACHE
#   tests     the GPU tests (pytest tests/gpu/test_*_gpu.py) and the moe test under mpirun (4, 1, 2 ranks)
#   families  one small suite per family (tests/gpu/suites/*-smoke.yaml, nvshmem-small.yaml, nccl-smoke.yaml)
#   suites    the shipped suites (collectives, allreduce-algos, nvshmem, proxy, moe at 1 rank, moe-ranks)
#   parity    commbench vs nccl-tests (benchmarks/parity_nccl_tests.sh on $NCCL_TESTS_TGZ, default
#             .tp/nccl-tests-2.19.6.tar.gz): parity.md and parity.tgz; then the cache-hot A/B
#             (buffer_span_bytes 0) and nccl-tests' fixed per-batch cost (-n 20 against -n 200)
#   x2        two GPUs: tests/gpu/suites/x2.yaml, x2-algos.yaml, x2-more.yaml, suites/moe.yaml at 2 ranks
# Every step's time limit is T_<STEP> seconds (e.g. T_COLLECTIVES=200), the default beside it.
# $OUT gets summary.txt (one line per step with its exit status, then its tail), info.json,
# pytest-*.log, moe_np*.jsonl, allreduce-gpu/ (rows and NCCL debug logs), proxy_gpu.jsonl and
# runs.tgz (every run folder and one report over them).
set -uo pipefail
. "$(dirname "$0")/env.sh"   # kill switches, PYTHONPATH, brought wheels, GPUS, MPI
OUT=${OUT:-/tmp/out}; R=${R:-/tmp/runs}; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; touch "$S"

limit() {  # limit NAME DEFAULT: the step's time limit, T_<NAME> overrides it
  local var="T_$(echo "$1" | tr 'a-z-' 'A-Z_')"; echo "${!var:-$2}"
}
cmd() {  # cmd NAME DEFAULT_SECONDS COMMAND...: a bounded command, its output in $OUT/NAME.log
  local name=$1 t; t=$(limit "$1" "$2"); shift 2; local t0=$SECONDS
  timeout -s TERM "$t" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s (limit $t s)" >> "$S"
  tail -n 15 "$OUT/$name.log" >> "$S"
}
run() {  # run NAME DEFAULT_SECONDS SUITE [commbench run options...]: a bounded `commbench run`
  local name=$1 t; t=$(limit "$1" "$2"); local suite=$3; shift 3; local t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "$@" > "$R/$name.console.txt" 2>&1
  echo "== run $name: rc=$? in $((SECONDS - t0)) s (limit $t s): commbench run $suite $*" >> "$S"
  tail -n 30 "$R/$name.console.txt" >> "$S"
}

group_build() {
  cmd prebuild 240 python3 tests/gpu/prebuild.py
}
group_tests() {
  COMMBENCH_GPU_OUT="$OUT/allreduce-gpu" cmd pytest-allreduce 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_allreduce_gpu.py
  cmd pytest-collectives 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_collectives_gpu.py
  cmd pytest-nvshmem 90 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_nvshmem_gpu.py
  PROXY_GPU_OUT="$OUT/proxy_gpu.jsonl" cmd pytest-proxy 120 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_proxy_gpu.py
  cmd pytest-moe 90 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_moe_gpu.py
  for n in 4 1 2; do   # several ranks may share one GPU (CUDA IPC works there; NCCL baselines skip)
    cmd "moe-np$n" 90 "${MPI[@]}" -np "$n" python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np$n.jsonl"
  done
}
group_families() {
  run nccl-smoke 60 tests/gpu/suites/nccl-smoke.yaml
  run allreduce-smoke 60 tests/gpu/suites/allreduce-smoke.yaml
  run nvshmem-small 110 tests/gpu/suites/nvshmem-small.yaml
  run proxy-smoke 80 tests/gpu/suites/proxy-smoke.yaml
  run moe-smoke 40 tests/gpu/suites/moe-smoke.yaml
}
group_suites() {
  run collectives 100 suites/collectives.yaml
  run allreduce 60 suites/allreduce-algos.yaml
  run nvshmem 70 suites/nvshmem.yaml
  run proxy 60 suites/proxy.yaml
  run moe-ranks 120 tests/gpu/suites/moe-ranks.yaml
  run moe 90 suites/moe.yaml --set ranks=1
}
group_parity() {
  local tgz=${NCCL_TESTS_TGZ:-.tp/nccl-tests-2.19.6.tar.gz} P=/tmp/parity-out work bin
  rm -rf "$P"
  PARITY_KEEP_WORK=1 cmd parity 420 bash benchmarks/parity_nccl_tests.sh "$tgz" "$P"
  cp "$P/parity.md" "$OUT/parity.md" 2>/dev/null; tar czf "$OUT/parity.tgz" -C /tmp parity-out
  run parity-hot-graph 120 suites/parity.yaml --set params.buffer_span_bytes=0 --set timing=graph
  run parity-n200 120 suites/parity.yaml --set iters=200 --set timing=pipelined \
    --set 'ops=[all_reduce, sendrecv]' --set 'sizes={min: 8, max: 8MiB, factor: 8}' --set params.in_place=false
  work=$(sed -n 's/.* work \(\/tmp\/parity\.[A-Za-z0-9]*\).*/\1/p' "$P/summary.txt" | head -n 1)
  bin=$(ls -d "$work"/nccl-tests*/build 2>/dev/null | head -n 1)
  { for n in 20 200; do for op in all_reduce sendrecv; do
      LD_LIBRARY_PATH=$work/nccl/lib timeout 60 "$bin/${op}_perf" -b 8 -e 8M -f 8 -g "$GPUS" -w 5 -n $n
    done; done; } > "$OUT/nt-iters.log" 2>&1
  echo "== nccl-tests -n 20 / -n 200: rc=$? ($bin)" >> "$S"
}
group_x2() {
  if [ "$GPUS" -lt 2 ]; then echo "== x2: skipped, $GPUS GPU(s) here" >> "$S"; return; fi
  run x2 120 tests/gpu/suites/x2.yaml
  run x2-algos 60 tests/gpu/suites/x2-algos.yaml
  run x2-more 120 tests/gpu/suites/x2-more.yaml
  run moe-ep2 150 suites/moe.yaml --set ranks=2
}

groups=("$@")
if [ ${#groups[@]} -eq 0 ]; then
  groups=(build tests families suites); [ "$GPUS" -ge 2 ] && groups+=(x2)
fi
for g in "${groups[@]}"; do
  case "$g" in build|tests|families|suites|parity|x2) ;;
    *) echo "unknown group '$g' (build, tests, families, suites, parity, x2)" >&2; exit 2 ;; esac
done
{ date -u; echo "groups: ${groups[*]}; GPUs: $GPUS"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m; } >> "$S" 2>&1
timeout 60 python3 -m commbench info --json > "$OUT/info.json" 2>&1
for g in "${groups[@]}"; do "group_$g"; done
if ls -d "$R"/*/ >/dev/null 2>&1; then
  timeout 90 python3 -m commbench report $(ls -d "$R"/*/) --out "$R/report.html" >> "$S" 2>&1
  tar czf "$OUT/runs.tgz" -C "$(dirname "$R")" "$(basename "$R")"
fi
grep '^== ' "$S"
