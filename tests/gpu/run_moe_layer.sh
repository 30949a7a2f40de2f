#!/usr/bin/env bash
# The MoE layer (issue 16) on one GPU. Parts (default: all, in this order):
#   tests  GPU tests: pack kernels against their torch twin, every backend with 1 rank,
#          a broken layer caught                                    (~1-2 min)
#   np4    the direct driver with 4 ranks sharing the GPU; DeepEP low latency in a process
#          of its own (it brings NVSHMEM up itself)                 (~1-2 min)
#   ranks  tests/gpu/suites/moe-layer-ranks.yaml through `commbench run` (4 ranks) (~2 min)
#   one    suites/moe-layer.yaml --set ranks=1 through `commbench run`            (~3-5 min)
# e.g. `bash tests/gpu/run_moe_layer.sh tests np4` then `bash tests/gpu/run_moe_layer.sh ranks one`.
# DeepEP v1.2.1 is used when importable (build it into /tmp/deepep first: recipe in
# ../shared/third_party/README.md). Writes $OUT/summary.txt, $OUT/layer_np4.jsonl, $OUT/runs.tgz.
set -uo pipefail
R=/tmp/runs-layer
source tests/gpu/session.sh
[ -d /tmp/deepep ] && export PYTHONPATH=$PYTHONPATH:/tmp/deepep
python3 -c "import deep_ep; print('deep_ep importable:', deep_ep.Buffer)" >> "$S" 2>&1
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES
     -x PYTHONPATH -x PYTHONUNBUFFERED -x COMMBENCH_JIT_CACHE)
PARTS=${*:-tests np4 ranks one}
for part in $PARTS; do
  t0=$SECONDS
  case $part in
    tests)
      timeout "${T_TESTS:-180}" python3 -m pytest -q -rs tests/gpu/test_moe_layer_gpu.py > "$R/pytest.txt" 2>&1
      echo "== pytest tests/gpu/test_moe_layer_gpu.py: rc=$? in $((SECONDS - t0)) s" >> "$S"
      tail -n 15 "$R/pytest.txt" >> "$S" ;;
    np4)
      for set in ipc,ipc_ll,nvshmem_ll,deepep,nccl_a2a deepep_ll; do
        t1=$SECONDS
        timeout "${T_NP4:-120}" "${MPI[@]}" -np 4 python3 tests/gpu/test_moe_layer_gpu.py \
          "$OUT/layer_np4.jsonl" "$set" > "$R/np4-$set.txt" 2>&1
        echo "== 4 ranks on one GPU, $set: rc=$? in $((SECONDS - t1)) s" >> "$S"
        tail -n 3 "$R/np4-$set.txt" >> "$S"
      done
      python3 - "$OUT/layer_np4.jsonl" >> "$S" 2>&1 <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r.get("verdict"), r["backend"], r.get("dtype"), r.get("overlap"), "broken" if r.get("broken") else "",
          "wrong=%s" % r.get("wrong"), "err=%s" % r.get("max_token_err"), (r.get("reason") or "")[:120])
PY
      ;;
    ranks) step layer-ranks "${T_RANKS:-240}" tests/gpu/suites/moe-layer-ranks.yaml ;;
    one) step layer-1gpu "${T_ONE:-360}" suites/moe-layer.yaml --set ranks=1 ;;
    *) echo "unknown part $part (tests, np4, ranks, one)" >> "$S" ;;
  esac
done
if ls -d "$R"/*/ > /dev/null 2>&1; then
  timeout 90 python3 -m commbench report $(ls -d "$R"/*/) --out "$R/report.html" >> "$S" 2>&1
fi
tar czf "$OUT/runs.tgz" -C /tmp "$(basename "$R")"
tail -n 5 "$S"
