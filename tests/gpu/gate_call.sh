#!/usr/bin/env bash
# One GPU call of the device tool: the gate (session.sh default) on this tree (its commit in .commit,
# carried), then the `checks` group with the time the call has left; the outputs packed so that at
# most 8 files come back under $OUT (gate-summary.txt, gate-status.txt, checks-summary.txt, info.json,
# logs.tgz, runs.tgz, uccl-summary.txt). GATE_S: the gate's limit (default 480); CALL_S: the whole call's (585);
# AFTER: the session groups run after the gate with the time left (default checks; summary in checks-summary.txt).
# With .uccl/ carried, UCCL-EP is built from source beside the gate and its rows run after it (uccl-rows).
# GATE_GROUPS="build tests checks": those groups instead of the default run (then it is not the gate).
export OUT; cd "$(dirname "$0")/../.."; echo "commit $(cat .commit)"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
G=$OUT/gate; U=$OUT/uccl; mkdir -p $G $U; UP=""
if [ -d .uccl ]; then   # UCCL-EP built from source beside the gate (CPU work while the gate uses the GPU)
  ( OUT=$U MAX_JOBS=6 timeout ${UCCL_BUILD_S:-420} bash tests/gpu/build_uccl_ep.sh .uccl > $U/build.txt 2>&1 ) &
  UP=$!
fi
OUT=$G SESSION_S=${GATE_S:-480} timeout ${GATE_S:-480} bash tests/gpu/session.sh ${GATE_GROUPS:-} > $G/session.log 2>&1; echo "gate rc=$? after $SECONDS s"
cat $G/status.txt; grep -E "^== " $G/summary.txt
if [ -n "$UP" ]; then
  wait $UP; echo "uccl-ep build beside the gate: rc=$? after $SECONDS s"; cat $U/build.txt
  left=$((${CALL_S:-585} - SECONDS))
  if [ $left -gt 60 ]; then
    OUT=$U SESSION_S=$((left - 5)) timeout $((left - 5)) bash tests/gpu/session.sh uccl-rows > $U/session.log 2>&1
    echo "uccl-rows rc=$? after $SECONDS s"; grep -E "^== |^uccl-ep|failed:" $U/summary.txt | head -n 20
  fi
fi
left=$((${CALL_S:-585} - SECONDS))
if [ $left -gt 90 ]; then   # AFTER: the groups run with the time left (default checks)
  C=$OUT/checks; mkdir -p $C
  OUT=$C SESSION_S=$((left - 5)) T_PYTEST_MEMORY=$((left/2)) T_PYTEST_BITWISE=$((left/2 - 10)) timeout $((left - 5)) \
    bash tests/gpu/session.sh ${AFTER:-checks} > $C/session.log 2>&1
  echo "${AFTER:-checks} rc=$? after $SECONDS s"; cat $C/status.txt; grep -E "^== " $C/summary.txt
fi
cp $G/summary.txt $OUT/gate-summary.txt; cp $G/status.txt $OUT/gate-status.txt; cp $G/info.json $OUT/info.json 2>/dev/null
[ -d $OUT/checks ] && cp $OUT/checks/summary.txt $OUT/checks-summary.txt
[ -f $U/summary.txt ] && cp $U/summary.txt $OUT/uccl-summary.txt
(cd $OUT && tar czf logs.tgz --exclude=runs.tgz gate checks uccl 2>/dev/null); cp $G/runs.tgz $OUT/runs.tgz 2>/dev/null
rm -rf $G $U $OUT/checks; ls -la $OUT
