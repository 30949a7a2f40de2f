#!/usr/bin/env bash
# Training family on the GPU machine: the 1-rank checks (every op and cp_comm: wrong = 0,
# counted bytes = formula, stale faults caught), then suites/training.yaml through the runner
# on every GPU of the node (one rank per GPU; bounded, an interrupted run keeps its rows).
# With several GPUs the same checks also run under mpirun, one rank per GPU.
# TRAIN_ARGS adds `commbench run` options to the suite run (e.g. TRAIN_ARGS="--set params.model=llama3-8b"
# for half the Cases); T1, TN, TS bound the three steps (seconds).
# Writes $OUT/training_gpu.log, $OUT/training_pytest.txt (a JSON row per check),
# $OUT/training_np*.jsonl (several GPUs), $OUT/training-run.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/training-out}
mkdir -p "$OUT"
NGPU=$(nvidia-smi -L | wc -l)
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x PYTHONPATH -x PYTHONUNBUFFERED)
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== 1 rank (pytest)"; t0=$SECONDS
  timeout "${T1:-200}" python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_training_gpu.py > "$OUT/training_pytest.txt" 2>&1
  echo "rc=$? in $((SECONDS - t0)) s"; grep -v '^{' "$OUT/training_pytest.txt" | tail -n 25
  if [ "$NGPU" -ge 2 ]; then
    echo "== $NGPU ranks"; t0=$SECONDS
    timeout "${TN:-300}" "${MPI[@]}" -np "$NGPU" python3 tests/gpu/test_training_gpu.py "$OUT/training_np$NGPU.jsonl"
    echo "rc=$? in $((SECONDS - t0)) s"
  fi
  echo "== suites/training.yaml (ranks: all = $NGPU) ${TRAIN_ARGS:-}"; t0=$SECONDS
  rm -rf /tmp/training-run
  # shellcheck disable=SC2086  # TRAIN_ARGS: options, split on spaces
  timeout -s TERM "${TS:-330}" python3 -m commbench run suites/training.yaml --out /tmp/training-run --quiet ${TRAIN_ARGS:-}
  echo "rc=$? in $((SECONDS - t0)) s"
  python3 - <<'PY'
import pandas as pd
df = pd.read_csv("/tmp/training-run/results.csv")
cols = ["op", "model", "strategy", "status", "wrong", "step_us", "compute_us", "comm_us", "exposed_comm_us", "idle_us",
        "slowest_rank", "exposed_comm_sub_us",
        "overlap_pct", "comm_bytes_per_rank", "comm_bytes_per_rank_measured", "comm_busbw_gbps",
        "check_max_err", "reason"]
pd.set_option("display.width", 250)
print(df[[c for c in cols if c in df.columns]].to_string())
PY
  tar czf "$OUT/training-run.tgz" -C /tmp training-run
} 2>&1 | tee "$OUT/training_gpu.log"
