#!/usr/bin/env bash
# GPU checks for the hardening of issue 21, one bounded step after another; results in $OUT/hardening.txt.
#  1. a real GPU run is read by the strict reader: report, compare and accept exit 0, every ok row has
#     iters x ranks samples, no temporary file is left, run.json names what ranks saw of the kill switches;
#  2. a second run into a folder a live GPU run is writing exits 2 naming the holder.
# (A full disk and a stopped rank do not depend on the device: tests/unit/test_run_full_disk_and_stops.py.)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
OUT=${OUT:-/tmp/out}; H=/tmp/hardening; rm -rf "$H"; mkdir -p "$OUT" "$H"
S="$OUT/hardening.txt"; : > "$S"
SUITE=tests/gpu/suites/hardening.yaml
say() { echo "$*" | tee -a "$S"; }

# 1. a GPU run through the one reader
timeout 300 python3 -m commbench run $SUITE --out "$H/run" --quiet > "$H/run.txt" 2>&1; say "run rc=$? (expect 0)"
tail -n 3 "$H/run.txt" >> "$S"
printf 'rules:\n  - {name: bw, select: {op: all_reduce}, metric: busbw_gbps, op: ">=", value: 0}\n' > "$H/rules.yaml"
timeout 120 python3 -m commbench report "$H/run" > "$H/report.txt" 2>&1; say "report rc=$? (expect 0)"
timeout 120 python3 -m commbench compare "$H/run" "$H/run" > "$H/compare.txt" 2>&1; say "compare rc=$? (expect 0)"
timeout 120 python3 -m commbench accept "$H/run" --rules "$H/rules.yaml" > "$H/accept.txt" 2>&1; say "accept rc=$? (expect 0)"
timeout 120 python3 - "$H/run" >> "$S" 2>&1 <<'PY'
import json, sys
from pathlib import Path
from commbench.runfolder.reader import load_run
run = load_run(sys.argv[1])
ok = run.results[run.results.status == "ok"]
per_case = run.samples.groupby("case_id").size().to_dict()
bad = [c for c, it, n in zip(ok.case_id, ok.iters, ok.world_size) if per_case.get(c) != it * n]
meta = json.loads((Path(sys.argv[1]) / "run.json").read_text())
print(f"rows {len(run.results)}, ok {len(ok)}, ok rows whose samples are not iters x ranks: {len(bad)} (expect 0)")
print("temporary files left:", sorted(p.name for p in Path(sys.argv[1]).glob(".*.tmp")), "(expect [])")
print("kill switches seen by ranks:", meta.get("kill_switches_seen_by_ranks"))
print("env_withheld:", meta.get("env_withheld"))
PY

# 2. one writer per folder, on a live GPU run
timeout 300 python3 -m commbench run $SUITE --out "$H/lock" --quiet > "$H/lock-first.txt" 2>&1 &
first=$!
for _ in $(seq 1 600); do [ -s "$H/lock/logs/launch-0.log" ] && break; sleep 0.1; done
timeout 120 python3 -m commbench run $SUITE --out "$H/lock" --resume --quiet > "$H/lock-second.txt" 2>&1
say "second writer rc=$? (expect 2): $(head -c 300 "$H/lock-second.txt")"
wait $first; say "first writer rc=$? (expect 0)"

tar czf "$OUT/hardening.tgz" -C /tmp hardening
tail -n 30 "$S"
