# Sourced by run_all.sh and run_x2.sh (the caller sets R, the folder for run folders):
# multicast kill switches, paths, $S (summary), machine facts, one parallel kernel build,
# and step NAME SECONDS SUITE [run options...] (a bounded `commbench run`; an interrupted
# run keeps every row measured so far).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMMBENCH_JIT_CACHE=/tmp/cb-jit
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$R"
S="$OUT/summary.txt"; : > "$S"
date -u >> "$S"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$S"
nvidia-smi topo -m >> "$S" 2>&1
timeout 60 python3 -m commbench info --json > "$R/info.json" 2>&1
cp "$R/info.json" "$OUT/info.json"
t0=$SECONDS
timeout 240 python3 tests/gpu/prebuild.py >> "$S" 2>&1
echo "== prebuild in $((SECONDS - t0)) s" >> "$S"
step() {
  local name=$1 t=$2 suite=$3; shift 3; local t0=$SECONDS
  timeout -s TERM "$t" python3 -m commbench run "$suite" --out "$R/$name" --quiet "$@" > "$R/$name.console.txt" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s" >> "$S"
  tail -n 40 "$R/$name.console.txt" >> "$S"
}
