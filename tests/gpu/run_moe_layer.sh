#!/usr/bin/env bash
# The MoE layer (issue 16) on the GPU machine. Parts (default: build deepep tests np4 ranks one):
#   build   every kernel library in parallel (tests/gpu/prebuild.py; skip if built)   (~40 s)
#   deepep  DeepEP v1.2.1 built into /tmp/deepep when it is not importable yet (recipe in
#           ../shared/third_party/README.md)                                          (~65 s)
#   tests   GPU tests: pack kernels against their torch twin, every backend with 1 rank,
#           a broken layer caught                                                     (~1-2 min)
#   np4     the direct driver with 4 ranks sharing the GPU; DeepEP low latency in a process
#           of its own (it brings NVSHMEM up itself)                                  (~1-2 min)
#   ranks   tests/gpu/suites/moe-layer-ranks.yaml through `commbench run` (4 ranks)   (~2 min)
#   one     suites/moe-layer.yaml --set ranks=1 through `commbench run`               (~3-5 min)
# e.g. `bash tests/gpu/run_moe_layer.sh build deepep tests np4`, later `... ranks one`.
# Each part is bounded (T_<PART> seconds overrides its limit). Writes $OUT/summary.txt,
# $OUT/layer_np4.jsonl, $OUT/moe-layer-runs.tgz (run folders, pytest and driver output, report).
set -uo pipefail
. "$(dirname "$0")/env.sh"   # kill switches, PYTHONPATH, brought wheels, GPUS, MPI
OUT=${OUT:-/tmp/out}; R=${R:-/tmp/runs-layer}; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; touch "$S"
TP=../shared/third_party; [ -d shared/third_party ] && TP=shared/third_party

step() {  # step NAME SECONDS SUITE [run options...]: a bounded `commbench run` (rows kept if cut)
  local name=$1 t=$2 suite=$3; shift 3; local t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "$@" > "$R/$name.console.txt" 2>&1
  echo "== run $name: rc=$? in $((SECONDS - t0)) s (limit $t s): commbench run $suite $*" >> "$S"
  tail -n 30 "$R/$name.console.txt" >> "$S"
}
deepep_path() { [ -d /tmp/deepep ] && export PYTHONPATH=$PYTHONPATH:/tmp/deepep; }

{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$S" 2>&1
deepep_path
PARTS=${*:-build deepep tests np4 ranks one}
for part in $PARTS; do
  t0=$SECONDS
  case $part in
    build)
      timeout "${T_BUILD:-240}" python3 tests/gpu/prebuild.py > "$R/prebuild.txt" 2>&1
      echo "== prebuild: rc=$? in $((SECONDS - t0)) s" >> "$S"; grep -v '^built' "$R/prebuild.txt" | tail -n 20 >> "$S" ;;
    deepep)
      if python3 -c "import deep_ep" 2>/dev/null; then
        echo "== deepep: already importable" >> "$S"
      elif [ -f "$TP/deepep-v1.2.1.tar.gz" ]; then
        ( tar xzf "$TP/deepep-v1.2.1.tar.gz" -C /tmp && cd /tmp/DeepEP-1.2.1 \
          && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 CPATH=/usr/local/cuda/include/cccl \
             NVCC_APPEND_FLAGS=-I/usr/local/cuda/include/cccl \
             timeout "${T_DEEPEP:-240}" python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/deepep . ) \
          > "$R/deepep-build.txt" 2>&1
        echo "== deepep build: rc=$? in $((SECONDS - t0)) s" >> "$S"; tail -n 5 "$R/deepep-build.txt" >> "$S"
        deepep_path
      else
        echo "== deepep: no $TP/deepep-v1.2.1.tar.gz, DeepEP rows will be skipped" >> "$S"
      fi
      python3 -c "import deep_ep; print('deep_ep importable:', deep_ep.Buffer)" >> "$S" 2>&1 ;;
    tests)
      timeout "${T_TESTS:-180}" python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_moe_layer_gpu.py \
        > "$R/pytest.txt" 2>&1
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
      [ -f "$OUT/layer_np4.jsonl" ] && python3 - "$OUT/layer_np4.jsonl" >> "$S" 2>&1 <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r.get("verdict"), r["backend"], r.get("dtype"), r.get("overlap"), "broken" if r.get("broken") else "",
          "wrong=%s" % r.get("wrong"), "err=%s" % r.get("max_token_err"), (r.get("reason") or "")[:120])
PY
      ;;
    ranks) step layer-ranks "${T_RANKS:-240}" tests/gpu/suites/moe-layer-ranks.yaml ;;
    one) step layer-1gpu "${T_ONE:-360}" suites/moe-layer.yaml --set ranks=1 ;;
    *) echo "unknown part $part (build, deepep, tests, np4, ranks, one)" >> "$S" ;;
  esac
done
if ls -d "$R"/*/ > /dev/null 2>&1; then
  timeout 90 python3 -m commbench report $(ls -d "$R"/*/) --out "$R/report.html" >> "$S" 2>&1
fi
tar czf "$OUT/moe-layer-runs.tgz" -C "$(dirname "$R")" "$(basename "$R")"
grep '^== ' "$S"
