#!/usr/bin/env bash
# One GPU call for everything: each shipped suite through `commbench run`, each bounded
# (an interrupted run keeps every row measured so far), then one report over all runs.
# Writes $OUT/runs.tgz (all run folders + report), $OUT/summary.txt, $OUT/info.json.
set -uo pipefail
R=/tmp/runs
source tests/gpu/session.sh
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
