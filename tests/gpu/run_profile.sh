#!/usr/bin/env bash
# GPU checks of profiling (issue 17), bounded to fit one 10-minute call. Parts (default: all but
# nsys and inspector, in this order):
#   unit    plugin build + CPU harness + ABI vs NCCL's header, NVTX recorder        (~25 s)
#   tests   tests/gpu/test_profile_gpu.py: NCCL loads our v5 plugin (init in the NCCL log), runs
#           stay correct, 1 rank says "no events (1 rank)" (events on 2+ GPUs), a torch trace
#           holds GPU activity, interference on one GPU                               (~1.5 min)
#   suite   tests/gpu/suites/profile.yaml (plain vs nccl-profiled vs torch-profiled), then
#           profile_compare.py (kernel_us vs time_us, plugin cost; 1 GPU: "no events") and
#           `commbench trace` of the run                                             (~1.5 min)
#   interf  suites/interference.yaml                                                  (~1.5 min)
#   nsys    NVTX ranges of the commbench domain through Nsight Systems, if installed
#   inspector  NCCL Inspector beside ours (2+ GPUs, INSPECTOR_SO=/path/libnccl-profiler-inspector.so)
# e.g. `bash tests/gpu/run_profile.sh unit tests`. T_<PART> seconds overrides a part's limit.
# Writes $OUT/summary.txt, $OUT/profile-*.txt, $OUT/profile-runs.tgz.
set -uo pipefail
. "$(dirname "$0")/env.sh"   # kill switches, PYTHONPATH, brought wheels, GPUS, MPI
OUT=${OUT:-/tmp/out}; R=${R:-/tmp/runs-profile}; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; touch "$S"

step() {  # step NAME SECONDS SUITE [run options...]: a bounded `commbench run` (rows kept if cut)
  local name=$1 t=$2 suite=$3; shift 3; local t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "$@" > "$R/$name.console.txt" 2>&1
  echo "== run $name: rc=$? in $((SECONDS - t0)) s (limit $t s): commbench run $suite $*" >> "$S"
  tail -n 30 "$R/$name.console.txt" >> "$S"
}

{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$S" 2>&1
PARTS=${*:-unit tests suite interf}
for part in $PARTS; do
  t0=$SECONDS
  case $part in
    unit)
      timeout "${T_UNIT:-90}" python3 -m pytest -q -rs -p no:cacheprovider tests/unit/test_nccl_profiler_plugin.py \
        tests/unit/test_profile_nvtx.py > "$OUT/profile-unit.txt" 2>&1
      echo "== profile unit tests: rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 4 "$OUT/profile-unit.txt" >> "$S" ;;
    tests)
      timeout "${T_TESTS:-240}" python3 -m pytest -q -rs -s -p no:cacheprovider -m gpu tests/gpu/test_profile_gpu.py \
        > "$OUT/profile-gpu-tests.txt" 2>&1
      echo "== profile GPU tests: rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 25 "$OUT/profile-gpu-tests.txt" >> "$S" ;;
    suite)
      step profile "${T_SUITE:-150}" tests/gpu/suites/profile.yaml
      python3 tests/gpu/profile_compare.py "$R/profile" >> "$S" 2>&1; echo "== compare rc=$?" >> "$S"
      grep -h "commbench profiler\|PROFILER\|Profiler" "$R"/profile/logs/launch-*.log 2>/dev/null | head -n 5 >> "$S"
      timeout 60 python3 -m commbench trace "$R/profile" > "$OUT/profile-trace.txt" 2>&1
      echo "== commbench trace: rc=$? ($(wc -l < "$OUT/profile-trace.txt") trace files)" >> "$S"
      python3 - "$OUT/profile-trace.txt" >> "$S" 2>&1 <<'PY'
import json, sys
sys.path.insert(0, ".")
from tests.unit.trace_format import validate_chrome_trace
paths = [p for p in open(sys.argv[1]).read().split() if p.endswith(".json")]
bad = {p: validate_chrome_trace(json.load(open(p)))[:2] for p in paths}
bad = {p: b for p, b in bad.items() if b}
print(f"chrome traces: {len(paths)} written, {len(bad)} invalid", *list(bad.items())[:3])
PY
      ;;
    interf) step interference "${T_INTERF:-150}" suites/interference.yaml ;;
    nsys)
      if command -v nsys >/dev/null; then
        timeout "${T_NSYS:-180}" nsys profile -t cuda,nvtx -o "$OUT/nsys-profile" --force-overwrite true \
          python3 -m commbench run tests/gpu/suites/profile.yaml --only plain --set sizes=[1MiB] --out "$R/nsys" \
          --quiet > "$OUT/nsys.txt" 2>&1
        echo "== nsys: rc=$? in $((SECONDS - t0)) s" >> "$S"
        nsys stats -r nvtx_sum "$OUT/nsys-profile.nsys-rep" 2>&1 | grep -m 5 "commbench\|Range" >> "$S"
      else
        echo "== nsys not installed: the unit test's NVTX recorder checks the ranges" >> "$S"
      fi ;;
    inspector)
      if [ "$GPUS" -ge 2 ] && [ -n "${INSPECTOR_SO:-}" ]; then
        NCCL_PROFILER_PLUGIN=$INSPECTOR_SO NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=/tmp/insp \
        NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=500 \
          step inspector "${T_INSP:-200}" tests/gpu/suites/profile.yaml --only plain
        python3 tests/gpu/profile_compare.py "$R/profile" /tmp/insp >> "$S" 2>&1
      else
        echo "== inspector: needs 2+ GPUs ($GPUS here) and INSPECTOR_SO" >> "$S"
      fi ;;
    *) echo "unknown part $part (unit, tests, suite, interf, nsys, inspector)" >> "$S" ;;
  esac
done
tar czf "$OUT/profile-runs.tgz" -C "$(dirname "$R")" "$(basename "$R")"
grep '^== ' "$S"
