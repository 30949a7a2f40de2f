#!/usr/bin/env bash
# The one GPU session of commbench: every GPU check, each step bounded (a step that runs out of
# time is killed; a `commbench run` keeps every row measured so far), results under $OUT.
#
#   bash tests/gpu/session.sh                   # the gate: build tests shared families (+ x2 on 2+ GPUs)
#   bash tests/gpu/session.sh build shared-full # only the named groups, in the order given
#
# The default run is the gate every change to commbench/ or kernels/ passes on its final commit
# (a representative slice of every group, ranks sharing the GPU included; under 10 minutes on one
# H200); its summary goes under docs/measurements/<date>-<machine>-session/. Its status is 0 only
# when every step is: a step's rows must each have the status the step expects (a step that
# injects a fault names the rows and the status it expects: tests/gpu/check_rows.py), and its
# commbench exit status must be what its rows imply.
#
# Groups:
#   build     every kernel library in parallel (tests/gpu/prebuild.py), cached in $COMMBENCH_JIT_CACHE,
#             and DeepEP from $TP/deepep-v1.2.1.tar.gz beside it (when the tarball is there)
#   tests     the GPU tests of nvshmem and the proxy, the preflight's NVML reading, the GPU health record,
#             and the moe test driver under mpirun with 2
#             ranks sharing the GPU (the allreduce family's own GPU tests, 70 s, are in tests-all: the
#             default run keeps it through shared-allreduce and allreduce-smoke)
#   shared    ranks sharing the GPU through `commbench run` (NCCL with one NCCL_HOSTID per rank):
#             collectives, allreduce, training and MoE at 4 ranks, --profile nccl at
#             2 and 4, a straggler named, trace, one suite inside MPI (mpiexec -n 2 commbench run),
#             compare refusing them
#   families  small suites: timeline-known (the step split's known answers), copy-smoke
#             (tests/gpu/suites/); `commbench nccl` (the quick form)
#   families-all  those, nccl-features (registration, misalignment, alltoallv at 1 and 2 ranks) and the 1-rank smoke suites nccl-smoke, allreduce-smoke (multimem skipped),
#             moe-smoke, nvshmem-small.yaml, proxy-smoke.yaml (a stalled proxy expected failed)
#   checks    the memory plans against the Cases' peaks, bitwise repeatability of NCCL collectives
#   tests-all every GPU test (checks included), the moe driver at 4, 1, 2 ranks and the MoE layer test (heavier)
#   shared-full the shared suites in full, the FSDP step split at 2 ranks, the MoE layer rehearsal and its broken-layer check at 4 ranks,
#             NCCL Inspector beside our plugin
#   suites    the shipped suites (collectives, allreduce-algos, nvshmem, proxy, moe at 1 rank, moe-ranks)
#   uccl      UCCL-EP (DeepEP's API over CPU proxies) built from source with the carried .uccl/ folder
#             (tests/gpu/build_uccl_ep.sh): does it build, does `uccl.ep` import on a machine without a NIC;
#             then uccl-rows
#   anchors   benchmarks/anchors.py (LL vs DeepEP, normal-mode EP baselines with UCCL-EP, experts, the prefill ceiling, proxy) into
#             $OUT/anchors.md and .json; UCCL-EP from a build under way or its own (.uccl/ carried), else skipped
#   short     pytest-health and the MoE rows' api_us / kernel_only_us at 2 ranks (for a call too short for the gate)
#   uccl-rows tests/gpu/suites/uccl-ep.yaml: uccl_ep rows (UCCL-EP's DeepEP-compatible wrapper) beside
#             deepep and ipc; on one GPU UCCL-EP skips (no 1-rank configuration; ranks sharing a GPU refused)
#   suites-more the other shipped suites one GPU can run: copy, interference, nvshmem-ibrc-vs-ibgda, parity at 1 rank
#   fit       suites/moe-layer.yaml and suites/training.yaml at 1 rank: whole shipped suites whose largest
#             Cases exceed an 80 GB card (each is skipped with its memory plan, never an OOM); then allreduce-large
#   training-1 suites/training.yaml at 1 rank (the part of fit a short call can take)
#   allreduce-large suites/allreduce-algos.yaml at 1 rank, 2 GiB and 8 GiB only (every backend, its memory plan)
#   parity    commbench vs nccl-tests (benchmarks/parity_nccl_tests.sh on $NCCL_TESTS_TGZ, default
#             $TP/nccl-tests-2.19.6.tar.gz): parity.md and parity.tgz; then the cache-hot A/B
#             (buffer_span_bytes 0) and nccl-tests' fixed per-batch cost (-n 20 against -n 200)
#   x2        two GPUs: tests/gpu/suites/x2.yaml, x2-algos.yaml, x2-more.yaml, suites/moe.yaml at 2 ranks
# Third-party tarballs ($TP): .tp/ in the checkout (carried to the GPU machine), else ../shared/third_party.
# Every step's time limit is T_<STEP> seconds (e.g. T_COLLECTIVES=200), the default beside it.
# $OUT gets summary.txt (one line per step with its exit status, then its tail), status.txt (the
# session's verdict), info.json, pytest-*.log, moe_np*.jsonl, allreduce-gpu/ (rows and NCCL debug
# logs), proxy_gpu.jsonl and runs.tgz (every run folder and one report over them).
set -uo pipefail
. "$(dirname "$0")/env.sh"   # kill switches, PYTHONPATH, brought wheels, GPUS, MPI
OUT=${OUT:-/tmp/out}; R=${R:-/tmp/runs}; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; touch "$S"
TP=.tp; [ -d "$TP" ] || TP=../shared/third_party
FAILED=()   # steps whose status was not the expected one

limit() {  # limit NAME DEFAULT: the step's time limit, T_<NAME> overrides it; with SESSION_S (the
  # whole session's seconds) no step may run past it, less the closing report's time
  local var="T_$(echo "$1" | tr 'a-z-' 'A-Z_')" t; t=${!var:-$2}
  if [ -n "${SESSION_S:-}" ]; then
    local left=$((SESSION_S - SECONDS - ${T_REPORT:-45} - 10)); [ "$left" -lt "$t" ] && t=$left; [ "$t" -lt 1 ] && t=1
  fi
  echo "$t"
}
verdict() {  # verdict NAME RC: record a step's status (0 = as expected)
  [ "$2" -eq 0 ] || FAILED+=("$1")
}
cmd() {  # cmd NAME DEFAULT_SECONDS COMMAND...: a bounded command that must exit 0, its output in $OUT/NAME.log
  local name=$1 t rc; t=$(limit "$1" "$2"); shift 2; local t0=$SECONDS
  timeout -s TERM "$t" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s (limit $t s)" >> "$S"
  tail -n 15 "$OUT/$name.log" >> "$S"; verdict "$name" "$rc"
}
run() {  # run NAME DEFAULT_SECONDS SUITE [commbench run options...] [-- check_rows options...]
  # A bounded `commbench run`; its rows are then held to what the step expects (check_rows.py).
  local name=$1 t rc crc; t=$(limit "$1" "$2"); local suite=$3; shift 3; local t0=$SECONDS
  local opts=() checks=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; checks=("$@"); }
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "${opts[@]}" \
    > "$R/$name.console.txt" 2>&1; rc=$?
  python3 tests/gpu/check_rows.py "$R/$name" --run-rc "$rc" "${checks[@]}" > "$R/$name.check.txt" 2>&1; crc=$?
  echo "== run $name: rc=$rc check=$crc in $((SECONDS - t0)) s (limit $t s): commbench run $suite ${opts[*]}" >> "$S"
  cat "$R/$name.check.txt" >> "$S"
  [ "$crc" -eq 0 ] || tail -n 20 "$R/$name.console.txt" >> "$S"
  verdict "run $name" "$crc"
}
deepep_path() { [ -d /tmp/deepep ] && export PYTHONPATH=$PYTHONPATH:/tmp/deepep; return 0; }

DP=""; DP_T0=0; DP_PENDING=0   # the DeepEP build in the background: its pid, start, not yet waited for
group_build() {
  DP_T0=$SECONDS; DP_PENDING=1
  if ! python3 -c "import deep_ep" 2>/dev/null && [ -f "$TP/deepep-v1.2.1.tar.gz" ]; then
    ( tar xzf "$TP/deepep-v1.2.1.tar.gz" -C /tmp && cd /tmp/DeepEP-1.2.1 \
      && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 CPATH=/usr/local/cuda/include/cccl \
         NVCC_APPEND_FLAGS=-I/usr/local/cuda/include/cccl \
         timeout "$(limit deepep 200)" python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/deepep . ) \
      > "$OUT/deepep-build.log" 2>&1 &
    DP=$!
  fi
  cmd prebuild 240 python3 tests/gpu/prebuild.py
}
deepep_wait() {   # the first step that may use DeepEP waits for its build (the steps before it run beside it)
  deepep_path
  [ "$DP_PENDING" -eq 1 ] || return 0
  if [ -n "$DP" ]; then
    wait "$DP"; echo "== deepep build: rc=$? in $((SECONDS - DP_T0)) s (beside the steps before this one)" >> "$S"
    tail -n 3 "$OUT/deepep-build.log" >> "$S"
  fi
  DP=""; DP_PENDING=0
  deepep_path
  python3 -c "import deep_ep; print('deep_ep importable')" >> "$S" 2>&1 || {
    echo "DeepEP not importable: its rows skip" >> "$S"
    # the device machine gets the checkout, not its parent folder: bring the tarballs as .tp/
    [ -f "$TP/deepep-v1.2.1.tar.gz" ] || echo "  no $TP/deepep-v1.2.1.tar.gz: mkdir .tp && cp ../shared/third_party/*.tar.gz .tp/, and carry .tp" >> "$S"
  }
}
group_tests() {
  cmd pytest-nvshmem 90 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_nvshmem_gpu.py
  PROXY_GPU_OUT="$OUT/proxy_gpu.jsonl" cmd pytest-proxy 120 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_proxy_gpu.py
  # the node as NVML shows it (preflight), the GPU health record, each Case's memory plan against its
  # peak, and a bitwise-repeatability run of NCCL collectives (1 rank and 2 sharing the GPU)
  cmd pytest-preflight 90 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_preflight_gpu.py
  HEALTH_RECORD_DIR="$OUT/health" cmd pytest-health 90 python3 -m pytest -q -rs -s -p no:cacheprovider \
    tests/gpu/test_health_gpu.py
  deepep_wait
  cmd moe-np2 90 "${MPI[@]}" -np 2 python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np2.jsonl"
}
group_checks() {   # each Case's memory plan against its peak; bitwise repeatability of NCCL collectives
  cmd pytest-memory 150 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_memory_plan_gpu.py
  cmd pytest-bitwise 150 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_bitwise_gpu.py
}
group_tests_all() {
  group_tests
  group_checks
  COMMBENCH_GPU_OUT="$OUT/allreduce-gpu" cmd pytest-allreduce 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_allreduce_gpu.py
  cmd pytest-collectives 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_collectives_gpu.py
  cmd pytest-moe 90 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_moe_gpu.py
  cmd pytest-training 120 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_training_gpu.py
  cmd pytest-moe-layer 180 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_moe_layer_gpu.py
  cmd pytest-profile 200 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_profile_gpu.py
  for n in 4 1; do   # several ranks may share one GPU (CUDA IPC, NVSHMEM, NCCL with NCCL_HOSTID per rank)
    cmd "moe-np$n" 120 "${MPI[@]}" -np "$n" python3 tests/gpu/test_moe_gpu.py "$OUT/moe_np$n.jsonl"
  done
  cmd training-np2 180 "${MPI[@]}" -np 2 python3 tests/gpu/test_training_gpu.py "$OUT/training_np2.jsonl"
}
SHARED_NCCL=(--shared --no-skip 'backend=nccl*' --no-skip 'backend=torch_nccl')
group_shared() {   # the default slice of the rehearsal: 2 and 4 ranks on one GPU
  # 4 ranks only here (2 ranks sharing the GPU: inside-mpi and shared-profile; both, and the FSDP
  # step's timeline split at 2: shared-full)
  run shared-collectives 150 tests/gpu/suites/shared-collectives.yaml --set 'sizes=[64KiB]' --set ranks=4 \
    -- "${SHARED_NCCL[@]}" --min-rows 40
  run shared-allreduce 90 tests/gpu/suites/shared-allreduce.yaml --set 'sizes=[4MiB]' --set ranks=4 \
    -- "${SHARED_NCCL[@]}"
  run shared-training 120 tests/gpu/suites/shared-training.yaml --set ranks=4 \
    -- "${SHARED_NCCL[@]}" --expect 'bench=stale=wrong'
  # every MoE row carries the call as a user makes it and its kernels alone (measure/api_kernel.py)
  run shared-moe 150 tests/gpu/suites/shared-moe.yaml --set ranks=4 -- --shared --no-skip 'backend=nccl*' \
    --require 'bench=dispatch-combine:api_us>0' --require 'bench=dispatch-combine:kernel_only_us>0'
  run shared-profile 150 tests/gpu/suites/shared-profile.yaml -- "${SHARED_NCCL[@]}" \
    --require 'bench=nccl-profiled:kernel_us>0' --require 'bench=nccl-profiled:nccl_channels>0' \
    --require 'bench=nccl-profiled:nccl_proxy_steps>0' --require 'bench=straggler:late_rank==1'
  cmd shared-trace 60 python3 -m commbench trace "$R/shared-profile"
  cmd shared-compare-refuses 60 bash -c '! python3 -m commbench compare "$0" "$0" --fail-above 5 \
    && python3 -m commbench compare "$0" "$0" 2>&1 | grep -q "shared one GPU"' "$R/shared-allreduce"
  group_inside_mpi
}
group_inside_mpi() {   # one suite of every family inside MPI: this job's processes are the ranks
  local t0=$SECONDS t rc crc; t=$(limit inside-mpi 150)
  timeout -s TERM "$t" "${MPI[@]}" -np 2 python3 -m commbench run tests/gpu/suites/shared-inmpi.yaml \
    --out "$R/inside-mpi" --quiet > "$R/inside-mpi.console.txt" 2>&1; rc=$?
  python3 tests/gpu/check_rows.py "$R/inside-mpi" --run-rc "$rc" "${SHARED_NCCL[@]}" --no-skip 'family=moe' \
    --no-skip 'family=allreduce' > "$R/inside-mpi.check.txt" 2>&1; crc=$?
  echo "== inside-mpi: rc=$rc check=$crc in $((SECONDS - t0)) s (limit $t s): mpirun -np 2 commbench run tests/gpu/suites/shared-inmpi.yaml" >> "$S"
  cat "$R/inside-mpi.check.txt" >> "$S"; [ "$crc" -eq 0 ] || tail -n 20 "$R/inside-mpi.console.txt" >> "$S"
  verdict inside-mpi "$crc"
}
group_shared_full() {   # heaviest first where it matters least: collectives, Inspector, MoE, training, layer
  # the 2-rank FSDP step split from its timeline (a row that breaks an invariant comes back wrong)
  run timeline-fsdp-np2 90 tests/gpu/suites/shared-training.yaml --set ranks=2 --only fsdp \
    -- "${SHARED_NCCL[@]}" --require 'bench=fsdp:comm_us>0' --require 'bench=fsdp:compute_us>0'
  run shared-collectives-full 300 tests/gpu/suites/shared-collectives.yaml -- "${SHARED_NCCL[@]}" \
    --require 'bench=ring:nccl_algo==Ring' --require 'bench=tree:nccl_algo==Tree' --require 'bench=pat:nccl_algo==PAT'
  run shared-profile-full 150 tests/gpu/suites/shared-profile.yaml --only nccl-profiled -- "${SHARED_NCCL[@]}" \
    --require 'bench=nccl-profiled:kernel_us>0' --require 'bench=nccl-profiled:nccl_proxy_steps>0'
  local insp
  insp=$(tar xzf "$TP/nccl-2.28.9-ext-profiler.tar.gz" -C /tmp 2>/dev/null && NC=$(python3 -c \
    "import nvidia.nccl as m; print(list(m.__path__)[0])") && mkdir -p /tmp/nccl/lib && ln -sf "$NC/include" /tmp/nccl/include \
    && ln -sf "$NC/lib/libnccl.so.2" /tmp/nccl/lib/libnccl.so && make -s -C /tmp/nccl-2.28.9-ext-profiler/ext-profiler/inspector \
    NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda >/dev/null 2>&1 && ls /tmp/nccl-2.28.9-ext-profiler/ext-profiler/inspector/*.so | head -n 1)
  if [ -n "$insp" ]; then
    rm -rf /tmp/insp; mkdir -p /tmp/insp
    NCCL_PROFILER_PLUGIN=$insp NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=/tmp/insp \
    NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=500 \
      run inspector 150 tests/gpu/suites/shared-profile.yaml --only nccl-profiled --set profile=none -- "${SHARED_NCCL[@]}"
    python3 tests/gpu/profile_compare.py "$R/shared-profile-full" /tmp/insp > "$OUT/inspector-compare.txt" 2>&1
    echo "== inspector beside our plugin (counts per op and size): rc=$?" >> "$S"; tail -n 30 "$OUT/inspector-compare.txt" >> "$S"
  else
    echo "== inspector: not built (no $TP/nccl-2.28.9-ext-profiler.tar.gz or the build failed)" >> "$S"
  fi
  run shared-moe-full 240 tests/gpu/suites/shared-moe.yaml -- --shared --no-skip 'backend=nccl*'
  run shared-training-full 240 tests/gpu/suites/shared-training.yaml -- "${SHARED_NCCL[@]}" --expect 'bench=stale=wrong'
  run shared-allreduce-full 150 tests/gpu/suites/shared-allreduce.yaml -- "${SHARED_NCCL[@]}"
  run moe-layer-ranks 240 tests/gpu/suites/moe-layer-ranks.yaml -- --shared --no-skip 'backend=nccl*'
  # a broken layer (rank 0's first expert takes another's weights) must be caught on every backend
  cmd moe-layer-broken-np4 180 "${MPI[@]}" -np 4 python3 tests/gpu/test_moe_layer_gpu.py "$OUT/layer_np4.jsonl" \
    ipc,ipc_ll,nvshmem_ll,deepep,nccl_a2a
}
group_families() {   # the default slice (nvshmem and proxy: their GPU tests in `tests`; the 1-rank smoke
  # suites of collectives, allreduce and moe: families-all, their families run in `shared` and inside-mpi)
  run timeline-known 60 tests/gpu/suites/timeline-known.yaml   # known answers of the step split, 1 rank
  run copy-smoke 40 tests/gpu/suites/copy-smoke.yaml -- --no-skip 'op=h2d' --no-skip 'op=d2h' --no-skip 'op=d2d'
  # the quick form as nccl-tests users type it: its table printed, its run folder held to its rows
  cmd quick-nccl 60 python3 -m commbench nccl all_reduce -b 8 -e 1M -f 32 -n 20 -w 5 -g 1 --out "$R/quick-nccl"
  python3 tests/gpu/check_rows.py "$R/quick-nccl" --run-rc 0 >> "$S" 2>&1 || verdict quick-nccl-rows 1
}
group_families_all() {
  group_families
  # registration (user / window), misaligned buffers, alltoallv traffic matrices at 1 and 2 ranks
  run nccl-features 90 tests/gpu/suites/nccl-features.yaml -- --require 'op=alltoallv:algbw_gbps>0'
  run nccl-smoke 60 tests/gpu/suites/nccl-smoke.yaml
  run allreduce-smoke 60 tests/gpu/suites/allreduce-smoke.yaml -- --expect 'bench=multimem=skipped'
  run moe-smoke 40 tests/gpu/suites/moe-smoke.yaml -- --no-skip 'backend=nccl*'
  run nvshmem-small 110 tests/gpu/suites/nvshmem-small.yaml
  run proxy-smoke 80 tests/gpu/suites/proxy-smoke.yaml -- --expect 'bench=stalled-proxy=failed'
}
group_suites() {
  run collectives 100 suites/collectives.yaml
  run allreduce 300 suites/allreduce-algos.yaml
  run nvshmem 70 suites/nvshmem.yaml
  run proxy 150 suites/proxy.yaml
  run moe-ranks 120 tests/gpu/suites/moe-ranks.yaml
  run moe 90 suites/moe.yaml --set ranks=1
}
group_suites_more() {   # the other shipped suites a one-GPU machine can run (issue of every shipped suite per card)
  run copy 240 suites/copy.yaml
  run interference 200 suites/interference.yaml
  run ibrc-vs-ibgda 90 suites/nvshmem-ibrc-vs-ibgda.yaml   # no InfiniBand HCA here: skipped with NVSHMEM's words
  run parity-1 150 suites/parity.yaml --set ranks=1
}
group_fit() {   # the shipped suites that ran out of memory on H100 80GB before Cases had memory plans
  run moe-layer-1 300 suites/moe-layer.yaml --set ranks=1
  group_training_1
  group_allreduce_large
}
group_training_1() {   # suites/training.yaml at 1 rank (llama3-70b's distributed optimizer ran out of memory on H100 80GB)
  run training-1 200 suites/training.yaml --set ranks=1
}
group_allreduce_large() {   # allreduce-algos' two largest sizes at 1 rank (8 GiB ran out of memory on H100 80GB)
  run allreduce-large 240 suites/allreduce-algos.yaml --set ranks=1 --set 'sizes=[2GiB, 8GiB]'
}
group_uccl() {   # UCCL-EP built from its source beside commbench (needs .uccl/ carried: build_uccl_ep.sh)
  if [ -d .uccl ]; then cmd uccl-ep-build 480 bash tests/gpu/build_uccl_ep.sh .uccl; group_uccl_rows
  else echo "== uccl-ep-build: skipped, no .uccl/ here (tests/gpu/build_uccl_ep.sh says what it holds)" >> "$S"; fi
}
group_uccl_rows() {   # after the build (group uccl, or gate_call.sh's beside the gate): its rows
  if ! ls /tmp/uccl-ep/uccl/ep*.so >/dev/null 2>&1; then
    echo "== uccl-rows: no UCCL-EP built in /tmp/uccl-ep (its build failed or did not run)" >> "$S"; return 0
  fi
  local up=$PYTHONPATH:/tmp/uccl-ep/site:/tmp/uccl-ep ul=/tmp/ibv/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  # its rows beside DeepEP's and ours: run, or skipped with UCCL-EP's own error
  PYTHONPATH=$up LD_LIBRARY_PATH=$ul run uccl-ep-rows 150 tests/gpu/suites/uccl-ep.yaml -- --shared
}
uccl_ep_ready() {   # UCCL-EP built in /tmp/uccl-ep: wait for a build under way, else build it (.uccl/ here)
  local t0=$SECONDS   # (a build that failed in this machine's life is not tried again)
  while [ -e /tmp/uccl-ep.building ] && [ $((SECONDS - t0)) -lt 420 ]; do sleep 5; done
  if ! ls /tmp/uccl-ep/uccl/ep*.so >/dev/null 2>&1 && [ -d .uccl ] && [ ! -e /tmp/uccl-ep.failed ]; then
    cmd uccl-ep-build 480 bash tests/gpu/build_uccl_ep.sh .uccl
  fi
  ls /tmp/uccl-ep/uccl/ep*.so >/dev/null 2>&1
}
group_anchors() {   # benchmarks/anchors.py: every section with DeepEP and UCCL-EP (built, or its rows skip)
  deepep_wait
  local up=$PYTHONPATH ul=${LD_LIBRARY_PATH:-}
  if uccl_ep_ready; then up=$up:/tmp/uccl-ep/site:/tmp/uccl-ep ul=/tmp/ibv/usr/lib/x86_64-linux-gnu:$ul; fi
  local budget=$(( $(limit anchors 540) - 20 )); [ "$budget" -lt 1 ] && budget=1   # (0 would mean no limit)
  PYTHONPATH=$up LD_LIBRARY_PATH=$ul cmd anchors 540 python3 benchmarks/anchors.py --out "$OUT/anchors.md" \
    --budget-s "$budget"
}
group_short() {   # a short call's check: this card's health record, and the MoE rows' three times
  # (time_us, api_us, kernel_only_us) on every dispatch/combine backend at 2 ranks sharing the GPU
  HEALTH_RECORD_DIR="$OUT/health" cmd pytest-health 90 python3 -m pytest -q -rs -s -p no:cacheprovider \
    tests/gpu/test_health_gpu.py
  run moe-api 120 tests/gpu/suites/shared-moe.yaml --set ranks=2 --only dispatch-combine -- --shared \
    --no-skip 'backend=nccl*' --require 'bench=dispatch-combine:api_us>0' \
    --require 'bench=dispatch-combine:kernel_only_us>0'
}
group_parity() {
  local tgz=${NCCL_TESTS_TGZ:-$TP/nccl-tests-2.19.6.tar.gz} P=/tmp/parity-out work bin
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

GROUPS_ALL="build tests shared families checks tests-all shared-full families-all suites suites-more fit training-1 allreduce-large uccl uccl-rows anchors short parity x2"
groups=("$@")
if [ ${#groups[@]} -eq 0 ]; then
  groups=(build tests shared families); [ "$GPUS" -ge 2 ] && groups+=(x2)
fi
for g in "${groups[@]}"; do
  case " $GROUPS_ALL " in *" $g "*) ;;
    *) echo "unknown group '$g' ($GROUPS_ALL)" >&2; exit 2 ;; esac
done
T0=$SECONDS
{ date -u; echo "commit: $(cat .commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "groups: ${groups[*]}; GPUs: $GPUS"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m; } >> "$S" 2>&1
timeout 60 python3 -m commbench info --json > "$OUT/info.json" 2>&1
for g in "${groups[@]}"; do
  case $g in build|tests) ;; *) deepep_wait ;; esac   # every other group may use DeepEP
  "group_${g//-/_}"
done
deepep_wait
# run folders only (a second session in the same call finds the first one's report_files/ in $R)
RUNS=$(for d in "$R"/*/; do [ -f "$d/results.csv" ] && echo "$d"; done)
if [ -n "$RUNS" ]; then
  local_t0=$SECONDS   # one report over every run folder (bounded: the steps' verdicts are already in)
  timeout "${T_REPORT:-45}" python3 -m commbench report $RUNS --out "$R/report.html" >> "$S" 2>&1
  echo "== closing report: rc=$? in $((SECONDS - local_t0)) s" >> "$S"
  tar czf "$OUT/runs.tgz" -C "$(dirname "$R")" "$(basename "$R")"
fi
# step logs and rows into one logs.tgz: $OUT keeps summary.txt, status.txt, info.json, runs.tgz, logs.tgz
( cd "$OUT" && ls | grep -v -x -e summary.txt -e status.txt -e info.json -e runs.tgz -e logs.tgz \
  | tar czf logs.tgz --remove-files -T - ) 2>/dev/null
if [ ${#FAILED[@]} -eq 0 ]; then
  echo "== session: PASS, every step as expected, in $((SECONDS - T0)) s" | tee "$OUT/status.txt" >> "$S"
else
  echo "== session: FAIL in $((SECONDS - T0)) s: ${#FAILED[@]} step(s) not as expected: ${FAILED[*]}" | tee "$OUT/status.txt" >> "$S"
fi
grep '^== \|^check: ' "$S"
[ ${#FAILED[@]} -eq 0 ]
