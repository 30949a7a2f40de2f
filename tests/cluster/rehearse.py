"""Repeat the acceptance rehearsal on a namespace cluster and count how often accept is right.

    sudo python tests/cluster/rehearse.py --repeat 10 [--seed 1] [--rate-mbit 100] [--delay-us 200]
        [--report runs.md] [--keep DIR]

Each repetition, with its own seed (node order, so the pairwise rounds and launch order change,
and which node or link is impaired): a healthy run of the whole CPU twin suite (accept must pass,
no node or link blamed), one node slowed (accept must name exactly that node), one link slowed
(accept must name exactly that link). Prints one line per run and a summary; --report writes
them as a Markdown table; --keep keeps the run folders (to judge them again with other rules:
`commbench accept DIR/<run>/run --rules FILE`). Exit 0 when every run was judged right, 1
otherwise; the cluster is torn down on any exit, Ctrl-C and SIGTERM included.
"""
from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cluster.testbed import ROOT, Cluster, commbench, why_unavailable

TWIN = ROOT / "suites" / "acceptance-multinode-cpu.yaml"
PAIRS_ONLY = ["--only", "pair-latency", "--only", "pair-bandwidth"]
BLAME = re.compile(r"^\| (bad node [^|]+?|bad links [^|]+?|slow host [^|]+?) \| node \| fail", re.M)


def _accept(cluster: Cluster, order: list[str], work: Path, only: list[str]) -> tuple[int, list[str], float]:
    run_dir = work / "run"
    hosts = f"COMMBENCH_HOSTS={','.join(order)}"
    t0 = time.time()
    cluster.run(["env", hosts, *commbench("run", str(TWIN), *only, "--out", str(run_dir), "--quiet")])
    res = cluster.run(["env", hosts, *commbench("accept", str(run_dir), "--junit", str(work / "accept.xml"))],
                      timeout=300)
    return res.returncode, BLAME.findall(res.stdout), time.time() - t0


def repetition(cluster: Cluster, seed: int, impair: dict, work: Path) -> list[dict]:
    rnd = random.Random(seed)
    order = rnd.sample(cluster.nodes, len(cluster.nodes))
    bad_node = rnd.choice(cluster.nodes)
    link = tuple(sorted(rnd.sample(cluster.nodes, 2)))
    what = " ".join(f"{k.replace('_', ' ')} {v}" for k, v in impair.items())
    out = []
    for case, expected, only in (("healthy", [], []),
                                 (f"slow node {bad_node} ({what})", [f"bad node {bad_node}"], PAIRS_ONLY),
                                 (f"slow link {'-'.join(link)} ({what})", [f"bad links {'-'.join(link)}"],
                                  PAIRS_ONLY)):
        cluster.heal()
        if case.startswith("slow node"):
            cluster.slow(bad_node, **impair)
        elif case.startswith("slow link"):
            cluster.slow_link(*link, **impair)
        sub = work / f"{seed}-{case.split(' (')[0].replace(' ', '-')}"
        sub.mkdir(parents=True)
        rc, blamed, wall_s = _accept(cluster, order, sub, only)
        right = blamed == expected and rc == (1 if expected else 0)
        out.append({"seed": seed, "order": ",".join(order), "case": case, "exit": rc,
                    "blamed": "; ".join(blamed) or "nobody", "right": right, "wall_s": wall_s})
        print(f"seed {seed} {case:40s} exit {rc} blamed: {out[-1]['blamed']:30s} "
              f"{'right' if right else 'WRONG'} ({wall_s:.0f} s)", flush=True)
    cluster.heal()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1, help="first seed; repetition k uses seed + k")
    ap.add_argument("--rate-mbit", type=int, default=100, help="the impaired rate (links run at 1000)")
    ap.add_argument("--delay-us", type=int, default=None, help="a per-packet delay (needs netem)")
    ap.add_argument("--report", type=Path, help="write the runs as a Markdown table here")
    ap.add_argument("--prefix", default="cbr", help="cluster name prefix (not the tests' cbt)")
    ap.add_argument("--net", default="10.213.24")
    ap.add_argument("--keep", type=Path, help="keep every run folder under this folder")
    args = ap.parse_args(argv)
    reason = why_unavailable()
    if reason:
        print(f"rehearse: cannot run here: {reason}", file=sys.stderr)
        return 2
    impair = {k: v for k, v in (("rate_mbit", args.rate_mbit), ("delay_us", args.delay_us)) if v}
    cluster = Cluster(prefix=args.prefix, net=args.net)
    rows = []

    def stop(signum, frame):  # SIGTERM (and SIGINT, which a background job ignores) tear down too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        cluster.up()
        with tempfile.TemporaryDirectory(prefix="rehearse-") as tmp:
            work = args.keep or Path(tmp)
            for k in range(args.repeat):
                rows += repetition(cluster, args.seed + k, impair, work)
    finally:
        cluster.down()
    summary = {}
    for r in rows:
        kind = r["case"].split(" ")[0] + (" " + r["case"].split(" ")[1] if r["case"] != "healthy" else "")
        right, total = summary.get(kind, (0, 0))
        summary[kind] = (right + r["right"], total + 1)
    lines = [f"{kind}: {right}/{total} judged right" for kind, (right, total) in summary.items()]
    print("\n".join(lines))
    if args.report:
        table = ["| seed | node order | case | exit | blamed | right | wall s |", "| --- " * 7 + "|"]
        table += [f"| {r['seed']} | {r['order']} | {r['case']} | {r['exit']} | {r['blamed']} | "
                  f"{'yes' if r['right'] else 'NO'} | {r['wall_s']:.0f} |" for r in rows]
        args.report.write_text("\n".join(table + [""] + [f"- {ln}" for ln in lines]) + "\n")
    return 0 if all(r["right"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
