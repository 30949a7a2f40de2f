"""Sequential launches against waves on the network-namespace test bed (CPU suites).

Brings up an N-node test bed (tests/cluster/netns-cluster.sh; root and iproute2), runs the
per-node and the pairs phase of a small CPU acceptance suite twice: one launch after another
(COMMBENCH_WAVES=0) and in waves, and writes the wall times and their ratio as Markdown.

    sudo /path/to/python benchmarks/acceptance_waves.py --nodes 8 --out docs/measurements/DATE-waves.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.testbed import Cluster, commbench, why_unavailable  # noqa: E402

SUITE = """\
name: waves-bench
defaults: {ranks: 1, ranks_per_node: 1, dtypes: [float32], warmup: 2, iters: 10, timeout_s: 60}
benchmarks:
  - {name: node, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [4KiB, 1MiB], placement: per_node}
  - {name: pair, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [1KiB, 1MiB], placement: pairs}
"""


def _run(bed: Cluster, suite: Path, phase: str, waves: bool, out: Path) -> dict:
    argv = ["env", f"COMMBENCH_WAVES={'1' if waves else '0'}",
            *commbench("run", str(suite), "--only", phase, "--out", str(out), "--quiet")]
    t0 = time.monotonic()
    proc = bed.run(argv, timeout=1800)
    wall_s = time.monotonic() - t0
    meta = json.loads((out / "run.json").read_text())
    launches = meta.get("launches", [])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return {"wall_s": wall_s, "exit": proc.returncode, "launches": len(launches),
            "waves": len({l.get("wave") for l in launches}),
            "ok": sum(r.get("status") == "ok" for r in rows), "rows": len(rows),
            "tail": (proc.stdout + proc.stderr)[-400:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--prefix", default="wvb")
    ap.add_argument("--net", default="10.213.88")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file to write (default: stdout)")
    args = ap.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"acceptance_waves: the test bed is unavailable here: {reason}", file=sys.stderr)
        return 3
    bed = Cluster(prefix=args.prefix, net=args.net, size=args.nodes)
    results = {}
    with tempfile.TemporaryDirectory(prefix="cb-waves-") as tmp:
        suite = Path(tmp) / "waves-bench.yaml"
        suite.write_text(SUITE)
        os.chmod(tmp, 0o755)
        bed.up()
        try:
            for phase in ("node", "pair"):
                for waves in (False, True):
                    key = (phase, "waves" if waves else "sequential")
                    results[key] = _run(bed, suite, phase, waves, Path(tmp) / f"{phase}-{key[1]}")
                    print(key, {k: v for k, v in results[key].items() if k != "tail"}, file=sys.stderr)
        finally:
            bed.down()
    text = _markdown(args.nodes, results)
    if args.out:
        args.out.write_text(text)
    print(text)
    bad = [k for k, r in results.items() if r["ok"] != r["rows"] or not r["rows"]]
    return 1 if bad else 0


def _markdown(nodes: int, results: dict) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpus = os.cpu_count()
    lines = [f"# Waves against one launch after another ({nodes} namespace nodes)", "",
             f"Measured {now} on {platform.node()} ({platform.machine()}, {cpus} CPUs, "
             f"{platform.system()} {platform.release()}, Python {platform.python_version()}) with "
             f"`benchmarks/acceptance_waves.py --nodes {nodes}`: the network-namespace test bed "
             "(docs/cluster-testbed.md), one MPI rank per node, Open MPI `mpiexec` per launch, CPU "
             "all_reduce at two sizes per launch. Every node shares this machine's cores: a launch's "
             "start-up (Python imports, MPI init) is CPU work, so a wave of 4 pair launches (8 processes) "
             "on 2 cores is bounded by the cores, not by the schedule.", "",
             "| phase | schedule | launches | waves | rows ok | wall s |", "|---|---|---|---|---|---|"]
    for (phase, mode), r in results.items():
        lines.append(f"| {'per_node' if phase == 'node' else 'pairs'} | {mode} | {r['launches']} | "
                     f"{r['waves']} | {r['ok']}/{r['rows']} | {r['wall_s']:.1f} |")
    lines.append("")
    for phase in ("node", "pair"):
        seq, wav = results.get((phase, "sequential")), results.get((phase, "waves"))
        if seq and wav and wav["wall_s"] > 0:
            lines.append(f"- {'per_node' if phase == 'node' else 'pairs'}: waves "
                         f"{seq['wall_s'] / wav['wall_s']:.2f}x faster than one launch after another.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
