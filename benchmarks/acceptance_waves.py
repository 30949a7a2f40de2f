"""Today's sequential launches against this tree's waves on the network-namespace test bed.

Brings up an N-node test bed (tests/cluster/netns-cluster.sh; root and iproute2) and runs the
per-node and the pairs phase of a small CPU acceptance suite in turns, A B A B (B A on every
second repetition, so a machine whose load drifts weighs on both alike):

- ``baseline``: the code of ``--baseline-rev`` (default: main before the launch-cost work), one
  launch after another (COMMBENCH_WAVES=0): what "today" costs;
- ``waves``: this tree, placed launches in waves;
- ``sequential`` (with ``--new-sequential``): this tree one launch after another, to tell the
  schedule's share from the launch cost's.

Each run is timed twice: ``wall`` is the whole `commbench run` process (start-up, plots and
report included, the same in every mode), ``span`` the phase itself, from the first launch's
start (its task file) to the last Case's end (its progress event). Writes Markdown: medians and
the ratio of each repetition's pair. Let the machine be quiet for the figures you keep:

    sudo /path/to/python benchmarks/acceptance_waves.py --nodes 8 --repeat 3 --out docs/measurements/DATE-waves.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.testbed import Cluster, why_unavailable  # noqa: E402

BASELINE_REV = "633c0d5"   # main on 2026-12-03 with waves merged, before the launch-cost work
SUITE = """\
name: waves-bench
defaults: {ranks: 1, ranks_per_node: 1, dtypes: [float32], warmup: 2, iters: 10, timeout_s: 60}
benchmarks:
  - {name: node, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [4KiB, 1MiB], placement: per_node}
  - {name: pair, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [1KiB, 1MiB], placement: pairs}
"""
PHASES = {"node": "per_node", "pair": "pairs"}


def baseline_tree(rev: str, dest: Path) -> Path:
    """The commbench of ``rev``, unpacked from git (no worktree is added to the repository)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "commbench"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # compiled now, not by the first ranks to import it (this tree's are compiled already)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest)], capture_output=True, check=True)
    return dest


def phase_span_s(out: Path) -> float | None:
    """First launch start (its task file's mtime) to the last Case's end (progress events)."""
    logs = out / "logs"
    starts = [p.stat().st_mtime for p in logs.glob("launch-*-try0.json")]
    ends = []
    for p in logs.glob("launch-*.progress.jsonl"):
        ends += [json.loads(line)["t"] for line in p.read_text().splitlines() if line.strip()]
    return max(ends) - min(starts) if starts and ends else None


def run_once(bed: Cluster, suite: Path, phase: str, tree: Path, waves: bool, out: Path) -> dict:
    argv = ["env", f"PYTHONPATH={tree}", f"COMMBENCH_WAVES={'1' if waves else '0'}", sys.executable, "-m",
            "commbench", "run", str(suite), "--only", phase, "--out", str(out), "--quiet"]
    t0 = time.monotonic()
    proc = bed.run(argv, timeout=1800, cwd=out.parent)
    wall_s = time.monotonic() - t0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    launches = json.loads((out / "run.json").read_text()).get("launches", [])
    return {"wall_s": wall_s, "span_s": phase_span_s(out), "exit": proc.returncode, "launches": len(launches),
            "ok": sum(r.get("status") == "ok" for r in rows), "rows": len(rows),
            "load": os.getloadavg()[0], "tail": (proc.stdout + proc.stderr)[-400:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="A/B pairs per phase and mode")
    ap.add_argument("--phases", default="node,pair", help="node, pair or both (default)")
    ap.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision that is 'today' (default %(default)s)")
    ap.add_argument("--new-sequential", action="store_true", help="also this tree one launch after another")
    ap.add_argument("--prefix", default="wvb")
    ap.add_argument("--net", default="10.213.88")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file to write (default: stdout only)")
    args = ap.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"acceptance_waves: the test bed is unavailable here: {reason}", file=sys.stderr)
        return 3
    modes = ["baseline", "waves"] + (["sequential"] if args.new_sequential else [])
    phases = [p for p in args.phases.split(",") if p in PHASES]
    bed = Cluster(prefix=args.prefix, net=args.net, size=args.nodes)
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cb-waves-") as tmp:
        os.chmod(tmp, 0o755)
        suite = Path(tmp) / "waves-bench.yaml"
        suite.write_text(SUITE)
        trees = {"baseline": baseline_tree(args.baseline_rev, Path(tmp) / "baseline"), "waves": ROOT,
                 "sequential": ROOT}
        bed.up()
        try:
            for rep in range(args.repeat):
                for phase in phases:
                    for mode in (modes if rep % 2 == 0 else modes[::-1]):
                        out = Path(tmp) / f"{phase}-{mode}-{rep}"
                        r = run_once(bed, suite, phase, trees[mode], mode == "waves", out)
                        results.setdefault((phase, mode), []).append(r)
                        print(phase, mode, rep, {k: (round(v, 2) if isinstance(v, float) else v)
                                                 for k, v in r.items() if k != "tail"}, file=sys.stderr)
                        if r["ok"] != r["rows"] or not r["rows"]:
                            print(r["tail"], file=sys.stderr)
        finally:
            bed.down()
    text = markdown(args, modes, phases, results)
    if args.out:
        args.out.write_text(text)
    print(text)
    bad = [k for k, rs in results.items() for r in rs if r["ok"] != r["rows"] or not r["rows"]]
    return 1 if bad else 0


def _ratios(results: dict, phase: str, slow: str, fast: str, key: str) -> list[float]:
    return [a[key] / b[key] for a, b in zip(results.get((phase, slow), []), results.get((phase, fast), []))
            if a[key] and b[key]]


def markdown(args, modes: list[str], phases: list[str], results: dict) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    lines = [f"# Waves against one launch after another ({args.nodes} namespace nodes)", "",
             f"Measured {now} on {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, "
             f"{platform.system()} {platform.release()}, Python {platform.python_version()}) with "
             f"`benchmarks/acceptance_waves.py --nodes {args.nodes} --repeat {args.repeat}`: baseline = "
             f"{args.baseline_rev} one launch after another, waves = {head or 'this tree'}; one MPI rank "
             "per node, Open MPI `mpiexec` per launch, CPU all_reduce at two sizes per launch; modes in "
             "turns, the order reversed every second repetition. wall: the whole `commbench run`; span: "
             "first launch start to last Case end.", "",
             "| phase | mode | launches | rows ok | wall s (median, min-max) | span s (median) | load avg |",
             "|---|---|---|---|---|---|---|"]
    for phase in phases:
        for mode in modes:
            rs = results.get((phase, mode), [])
            if not rs:
                continue
            walls = [r["wall_s"] for r in rs]
            spans = [r["span_s"] for r in rs if r["span_s"]]
            span = f"{statistics.median(spans):.1f}" if spans else "-"
            lines.append(f"| {PHASES[phase]} | {mode} | {rs[0]['launches']} | "
                         f"{sum(r['ok'] for r in rs)}/{sum(r['rows'] for r in rs)} | "
                         f"{statistics.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f}) | {span} | "
                         f"{statistics.median(r['load'] for r in rs):.1f} |")
    lines.append("")
    for phase in phases:
        for slow in [m for m in modes if m != "waves"]:
            wall = _ratios(results, phase, slow, "waves", "wall_s")
            span = _ratios(results, phase, slow, "waves", "span_s")
            if wall:
                lines.append(f"- {PHASES[phase]}: waves {statistics.median(wall):.2f}x faster than {slow} "
                             f"by wall (each pair of runs: {', '.join(f'{x:.2f}' for x in wall)})"
                             + (f", {statistics.median(span):.2f}x by span" if span else "") + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
