#!/usr/bin/env bash
# GPU checks of profiling (issue 17), one bounded call (< 10 min). Writes $OUT/summary.txt, $OUT/runs.tgz.
#   bash tests/gpu/run_profile.sh            (any number of GPUs; several GPUs add the targets
#                                            that need events: kernel vs event time, plugin cost)
#   NSYS=1 ...                               also NVTX ranges through Nsight Systems, if installed
#   INSPECTOR_SO=/path/libnccl-profiler-inspector.so ...   NCCL Inspector beside ours (2+ GPUs)
set -uo pipefail
R=/tmp/runs
source tests/gpu/session.sh
t0=$SECONDS
timeout 90 python3 -m pytest -q tests/unit/test_nccl_profiler_plugin.py tests/unit/test_profile_nvtx.py \
  > "$OUT/profile-unit.txt" 2>&1
echo "== profile unit tests rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 3 "$OUT/profile-unit.txt" >> "$S"
t0=$SECONDS
timeout 240 python3 -m pytest -q -s -m gpu tests/gpu/test_profile_gpu.py > "$OUT/profile-gpu-tests.txt" 2>&1
echo "== profile GPU tests rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 25 "$OUT/profile-gpu-tests.txt" >> "$S"
step profile "${T_PROFILE:-120}" tests/gpu/suites/profile.yaml
python3 tests/gpu/profile_compare.py "$R/profile" >> "$S" 2>&1; echo "== compare rc=$?" >> "$S"
grep -h "commbench profiler\|PROFILER\|Profiler" "$R"/profile/logs/launch-*.log | head -n 5 >> "$S"
step interference "${T_INTERF:-120}" suites/interference.yaml
if [ "${NSYS:-0}" = 1 ] && command -v nsys >/dev/null; then   # NVTX ranges of the commbench domain, as Nsight Systems sees them
  timeout 180 nsys profile -t cuda,nvtx -o "$OUT/nsys-profile" --force-overwrite true \
    python3 -m commbench run tests/gpu/suites/profile.yaml --only plain --set sizes=[1MiB] --out "$R/nsys" --quiet \
    > "$OUT/nsys.txt" 2>&1
  nsys stats -r nvtx_sum "$OUT/nsys-profile.nsys-rep" 2>&1 | grep -m 5 "commbench\|Range" >> "$S"
else
  echo "== nsys not run (NSYS=1 and an installed nsys): the unit test's NVTX recorder checks the ranges" >> "$S"
fi
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ -n "${INSPECTOR_SO:-}" ]; then   # NCCL Inspector beside ours
  NCCL_PROFILER_PLUGIN=$INSPECTOR_SO NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=/tmp/insp \
  NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=500 \
    step inspector "${T_INSP:-200}" tests/gpu/suites/profile.yaml --only plain
  python3 tests/gpu/profile_compare.py "$R/profile" /tmp/insp >> "$S" 2>&1
fi
tar czf "$OUT/runs.tgz" -C /tmp runs
tail -n 60 "$S"
