#!/usr/bin/env bash
# Build UCCL-EP (the `ep/` of UCCL da914a2: DeepEP's Buffer API over CPU proxies posting RDMA
# writes) on the GPU machine, beside commbench, and say whether `uccl.ep` imports and what it says
# without an RDMA NIC. Nothing is installed over the system: the Debian packages it links
# (libibverbs, libnl, libnuma) are unpacked under /tmp/ibv, the build goes to /tmp/uccl-ep.
#
#   bash tests/gpu/build_uccl_ep.sh [DIR]     # DIR: the folder brought along (default .uccl)
#
# DIR holds uccl-da914a2.tar.gz, nanobind-*.whl and the .deb files; prepared on a machine with
# network: apt-get download libibverbs-dev libibverbs1 ibverbs-providers libnl-3-200
# libnl-route-3-200 libnl-3-dev libnl-route-3-dev libnuma-dev libnuma1; pip download nanobind.
# Prints `uccl-ep: built` / `uccl-ep: import ok` or the first error; the log goes to $OUT/uccl-ep.log.
# Its DeepEP-compatible wrapper is then put beside it as uccl_deep_ep (session group uccl-rows runs it).
set -uo pipefail
DIR=${1:-.uccl}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; LOG=$OUT/uccl-ep.log
BUILDING=/tmp/uccl-ep.building   # while it exists a build is under way (session.sh's anchors waits on it)
FAILED=/tmp/uccl-ep.failed       # left by a build that did not finish: session.sh does not try again
rm -f "$FAILED"; touch "$BUILDING"
trap 'rc=$?; rm -f "$BUILDING"; [ $rc -eq 0 ] || touch "$FAILED"' EXIT
{
  rm -rf /tmp/ibv /tmp/uccl-src /tmp/uccl-ep && mkdir -p /tmp/ibv /tmp/uccl-src /tmp/uccl-ep/uccl
  for d in "$DIR"/*.deb; do dpkg -x "$d" /tmp/ibv; done
  python3 -m pip install -q --no-index --no-deps --target /tmp/uccl-ep/site "$DIR"/nanobind-*.whl
  tar xzf "$DIR"/uccl-da914a2.tar.gz -C /tmp/uccl-src
} > "$LOG" 2>&1 || { echo "uccl-ep: unpacking failed (see $LOG)"; tail -5 "$LOG"; exit 1; }
IBV=/tmp/ibv/usr; ARCH=$IBV/lib/x86_64-linux-gnu
export PYTHONPATH=/tmp/uccl-ep/site:/tmp/uccl-ep:${PYTHONPATH:-}
export CPATH=$IBV/include:/usr/local/cuda/include/cccl${CPATH:+:$CPATH} LIBRARY_PATH=$ARCH${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$ARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${MAX_JOBS:-16} USE_DMABUF=${USE_DMABUF:-1}
SRC=$(ls -d /tmp/uccl-src/*/ep | head -n 1)
t0=$SECONDS
( cd "$SRC" && timeout "${T_UCCL_BUILD:-400}" python3 setup.py build_ext --inplace ) >> "$LOG" 2>&1
rc=$?; echo "uccl-ep: build rc=$rc in $((SECONDS - t0)) s"
[ $rc -eq 0 ] || { grep -m 3 -E "error|Error" "$LOG"; tail -n 5 "$LOG"; exit 1; }
cp "$SRC"/ep*.so /tmp/uccl-ep/uccl/ && touch /tmp/uccl-ep/uccl/__init__.py
python3 - >> "$LOG" 2>&1 <<'PY'
import torch
from uccl import ep
print("uccl-ep: import ok:", ep.__file__, [n for n in dir(ep) if not n.startswith("_")][:12])
print("uccl-ep: torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())
PY
echo "uccl-ep: import rc=$?"; grep "^uccl-ep:" "$LOG"
# its DeepEP-compatible wrapper as uccl_deep_ep (no clash with DeepEP's deep_ep)
WRAP=$(dirname "$SRC")/ep/deep_ep_wrapper/deep_ep
# (its buffer.py and utils.py are links into ../../bench/: copied as files, -L)
[ -d "$WRAP" ] && rm -rf /tmp/uccl-ep/uccl_deep_ep && cp -rL "$WRAP" /tmp/uccl-ep/uccl_deep_ep \
  || { echo "uccl-ep: its wrapper $WRAP could not be put in place"; exit 1; }
