#!/usr/bin/env bash
# Parity of commbench with nccl-tests on this machine's GPUs (docs/import.md, "Parity").
#
#   benchmarks/parity_nccl_tests.sh NCCL_TESTS_TARBALL OUT_DIR
#
# Builds nccl-tests from the tarball against the NCCL that torch loads, runs the seven ops on
# every GPU (-g N, -w 5 -n 20) with the default loop and with -G 5, runs suites/parity.yaml
# (timing pipelined and graph, the same sizes, in- and out-of-place), imports the nccl-tests
# -J files with `commbench import nccl-tests`, compares, and writes OUT_DIR/parity.md: the
# ratio commbench / nccl-tests per op and size, with the machine and the date.
# Sizes: PARITY_MIN (8), PARITY_MAX (1G), PARITY_FACTOR (4), as nccl-tests -b/-e/-f.
# Also: PYTHON (python3), PARITY_TARGET (1.05), PARITY_KEEP_WORK=1 (keep the nccl-tests build in
# the work folder named on the first line of summary.txt, for further runs). Meant to finish within ~6 minutes on one H200.
# Exit: 0 every paired point within the target, 1 some above it, 2 bad arguments, 3 a step failed.
set -uo pipefail

# Multicast stays off, whatever the caller's environment says: a multicast program can take a
# shared NVSwitch host out of service. Setting these can only make a run safer.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

if [ $# -ne 2 ] || [ ! -f "$1" ]; then
  echo "usage: $0 NCCL_TESTS_TARBALL OUT_DIR   (the tarball must exist)" >&2
  exit 2
fi
TARBALL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OUT=$2
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
if [ -n "$(ls -A "$OUT")" ]; then
  echo "$OUT is not empty: choose a new output folder" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
MIN=${PARITY_MIN:-8} MAX=${PARITY_MAX:-1G} FACTOR=${PARITY_FACTOR:-4}
OPS="all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
WORK=$(mktemp -d /tmp/parity.XXXXXX)
S=$OUT/summary.txt
: > "$S"
say() { echo "$*" | tee -a "$S"; }
fail() { say "FAILED: $*"; exit 3; }
T0=$SECONDS

say "parity: $(date -u '+%Y-%m-%d %H:%M UTC'), sizes -b $MIN -e $MAX -f $FACTOR, work $WORK"
MACHINE=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | awk '{n=$1; $1=""; printf "%s%dx%s", (NR>1?", ":""), n, $0}')
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())") || fail "torch sees no CUDA"
[ "$NGPU" -ge 1 ] || fail "no GPU visible"
say "machine: $MACHINE; $NGPU GPU(s) used"

# -- build nccl-tests against torch's NCCL (both tools must measure one library) ---------------
NC=$($PY -c "import nvidia.nccl as m; print(list(m.__path__)[0])") || fail "no nvidia.nccl package"
WANT=$($PY -c "
import torch
v = torch.cuda.nccl.version()
v = v if isinstance(v, tuple) else (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)
print(v[0] * 10000 + v[1] * 100 + v[2])")
mkdir -p "$WORK/nccl/lib"
ln -sf "$NC/include" "$WORK/nccl/include"
# the binary links libnccl.so.2: without that name here it would load the system's NCCL
ln -sf "$NC/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so"
ln -sf "$NC/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so.2"
tar xzf "$TARBALL" -C "$WORK" || fail "cannot unpack $TARBALL"
SRC=$(ls -d "$WORK"/nccl-tests*/ | head -n 1)
t=$SECONDS
timeout 300 make -C "$SRC" -j"$(nproc)" MPI=0 NCCL_HOME="$WORK/nccl" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" src.build > "$OUT/build.log" 2>&1 \
  || { tail -n 20 "$OUT/build.log" >> "$S"; fail "nccl-tests build (see build.log)"; }
say "built nccl-tests in $((SECONDS - t)) s"
export LD_LIBRARY_PATH=$WORK/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# -- nccl-tests: default loop and -G 5, text on stdout and -J JSON ------------------------------
NT=$OUT/nccl-tests
mkdir -p "$NT"
t=$SECONDS
for op in $OPS; do
  for graph in "" 5; do
    name=${op}_perf${graph:+_G$graph}
    timeout 180 "$SRC/build/${op}_perf" -b "$MIN" -e "$MAX" -f "$FACTOR" -g "$NGPU" -w 5 -n 20 \
      ${graph:+-G $graph} -J "$NT/$name.json" > "$NT/$name.txt" 2>&1
    rc=$?
    lib=$(sed -n 's/.*nccl-library=\([0-9]*\).*/\1/p' "$NT/$name.txt" | head -n 1)
    say "nccl-tests $name: rc=$rc nccl-library=$lib"
    [ "$rc" -eq 0 ] || fail "nccl-tests $name (see nccl-tests/$name.txt)"
    [ "$lib" = "$WANT" ] || fail "nccl-tests $name loaded NCCL $lib, torch's is $WANT"
  done
done
# Per-iteration timing (-I) of one op: keeps a real -I text and JSON output for the import tests.
mkdir -p "$NT/per_iter"
timeout 120 "$SRC/build/all_reduce_perf" -b 8 -e 128M -f 8 -g "$NGPU" -w 5 -n 20 -I 1 \
  -J "$NT/per_iter/all_reduce_perf_I.json" > "$NT/per_iter/all_reduce_perf_I.txt" 2>&1
say "nccl-tests -I: rc=$?; all nccl-tests runs in $((SECONDS - t)) s"

# -- commbench: the same points, timing pipelined and graph -----------------------------------
t=$SECONDS
timeout -s TERM 360 $PY -m commbench run suites/parity.yaml --out "$OUT/commbench" --quiet \
  --set "sizes={min: $MIN, max: $MAX, factor: $FACTOR}" > "$OUT/commbench.console.txt" 2>&1
rc=$?
say "commbench run: rc=$rc in $((SECONDS - t)) s (rc 1: some row not ok, see the table)"
tail -n 5 "$OUT/commbench.console.txt" >> "$S"
[ -f "$OUT/commbench/results.csv" ] || fail "commbench run wrote no results"

# -- import, compare, table -------------------------------------------------------------------
$PY -m commbench import nccl-tests "$NT"/*_perf.json "$NT"/*_perf_G5.json --bench nccl --out "$OUT/nccl-tests-run" >> "$S" 2>&1 \
  || fail "import of the -J files"
# the printed tables of the same runs must import to the same points (to their 2 printed decimals)
$PY -m commbench import nccl-tests "$NT"/*_perf.txt "$NT"/*_perf_G5.txt --bench nccl --out "$OUT/nccl-tests-text-run" >> "$S" 2>&1 \
  || fail "import of the text tables"
$PY - "$OUT/nccl-tests-run" "$OUT/nccl-tests-text-run" >> "$S" 2>&1 <<'EOF_PY'
import sys
from commbench.runfolder.reader import load_run
key = ["op", "size_bytes", "in_place", "timing"]
js, txt = (load_run(p).results.set_index(key)["time_us"] for p in sys.argv[1:3])
diff = (js - txt.reindex(js.index)).abs()
bad = diff[~(diff <= (js * 1e-5).clip(lower=0.0051))]   # the table prints 2 decimals (1 above 9999.99)
print(f"json vs text import: {len(js)} and {len(txt)} points, {len(bad)} differ beyond the printed rounding")
EOF_PY
$PY -m commbench import nccl-tests "$NT/per_iter/all_reduce_perf_I.json" --out "$OUT/nccl-tests-I-run" >> "$S" 2>&1 \
  || say "import of the -I JSON failed (see above)"
$PY -m commbench import nccl-tests "$NT/per_iter/all_reduce_perf_I.txt" --out "$OUT/nccl-tests-I-text-run" >> "$S" 2>&1 \
  || say "import of the -I text failed (see above)"
$PY -m commbench compare "$OUT/nccl-tests-run" "$OUT/commbench" --out "$OUT/compare.html" > "$OUT/compare.console.txt" 2>&1
say "commbench compare: rc=$?"
$PY benchmarks/parity_table.py "$OUT/nccl-tests-run" "$OUT/commbench" --out "$OUT/parity.md" \
  --machine "$MACHINE" --target "${PARITY_TARGET:-1.05}" >> "$S" 2>&1
rc=$?
say "parity table: $OUT/parity.md (rc=$rc); total $((SECONDS - T0)) s"
[ "${PARITY_KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
exit $rc
