#!/usr/bin/env bash
# Two-GPU call (nvidia-h200-x2): kernels built in parallel, then bounded suite runs
# (an interrupted run keeps its rows), then one report. Writes $OUT/x2.tgz and $OUT/summary.txt.
#   X2_SET=base (default): tests/gpu/suites/x2.yaml + x2-algos.yaml
#   X2_SET=moe:  suites/moe.yaml at 2 ranks (EP2, every backend incl. nvshmem_ll and graph timing),
#                tests/gpu/suites/x2-more.yaml, the NCCL smoke suite at 2 ranks
#   X2_SET=ll:   the low-latency and small MoE benchmarks at 2 ranks, our normal dispatch
#                over an SM sweep, and the device reduce_scatter skip
#   X2_SET=rt:   MoE at 2 ranks with round_trip (small, DeepEP normal and low-latency shapes),
#                and moe-ranks.yaml (4 ranks, two per GPU)
#   X2_SET=final: MoE at 2 ranks (one per GPU) and 4 ranks (two per GPU), NVSHMEM atomics,
#                the IBRC/IBGDA suite on one host (P2P off, no HCA: skipped with NVSHMEM's reason)
set -uo pipefail
R=/tmp/x2
source tests/gpu/session.sh
if [ "${X2_SET:-base}" = moe ]; then
  step moe-ep2 "${T_MOE:-150}" suites/moe.yaml --set ranks=2
  step x2-more "${T_MORE:-120}" tests/gpu/suites/x2-more.yaml
  step smoke "${T_SMOKE:-45}" tests/gpu/suites/nccl-smoke.yaml --set ranks=2
elif [ "${X2_SET:-base}" = rt ]; then
  step moe-ep2 "${T_MOE:-150}" suites/moe.yaml --set ranks=2 --only small-check \
    --only deepep-normal --only deepep-low-latency
  step moe-4ranks "${T_MOE4:-120}" tests/gpu/suites/moe-ranks.yaml
elif [ "${X2_SET:-base}" = final ]; then
  step moe-ep2 "${T_MOE:-120}" suites/moe.yaml --set ranks=2 --only small-check \
    --only deepep-low-latency --only low-latency-graph
  step moe-4ranks "${T_MOE4:-90}" tests/gpu/suites/moe-ranks.yaml
  step atomics "${T_AT:-30}" tests/gpu/suites/x2-more.yaml --only nvshmem-atomics
  step no-hca "${T_IB:-60}" suites/nvshmem-ibrc-vs-ibgda.yaml --set ranks_per_node=2 --set iters=5
elif [ "${X2_SET:-base}" = ll ]; then
  step moe-ll-ep2 "${T_MOE:-120}" suites/moe.yaml --set ranks=2 --only small-check \
    --only deepep-low-latency --only low-latency-graph
  step moe-sms-ep2 "${T_SMS:-60}" suites/moe.yaml --set ranks=2 --only deepep-normal \
    --set backends=[ipc] --set 'params.num_sms=[16,24,48,96,132]'
  step x2-rs "${T_RS:-40}" tests/gpu/suites/x2-more.yaml --only nvshmem-collectives --set ops=[reduce_scatter]
else
  step x2 "${T1:-120}" tests/gpu/suites/x2.yaml
  step x2-algos "${T2:-60}" tests/gpu/suites/x2-algos.yaml
fi
timeout 40 python3 -m commbench report $(ls -d "$R"/*/) --out "$R/report.html" >> "$S" 2>&1
tar czf "$OUT/x2.tgz" -C /tmp x2
tail -n 3 "$S"
