"""Cost of `compare`, `report` and `accept` as a run folder grows to fleet size (issue 40).

    python benchmarks/fleet_scale.py [--points 1000 10000 100000] [--keep DIR] [--markdown]

For each size it builds synthetic run folders through the real writer (commbench.runfolder:
results.jsonl appended, results.csv written from it by RunFolder, samples through
append_samples, run.json through write_meta), so every reader check applies:

- a per-node acceptance over H hosts (placement per_node: rows carry ``host`` and ``hosts``):
  4 ops x 25 sizes (8 B .. 128 MiB) per host, 2 ranks x 10 iterations = 20 samples per point,
  H = points / 100 (1,000 hosts at 100k points); one host in 200 (at least one) is 30 % slower;
- BASE and NEW: the same points, fresh noise, and in NEW 2x slower times on 3 sizes of one op;
- a rules file with a busbw floor, a time ceiling and ``localize`` on.

Then it runs, each as its own child process, ``compare BASE NEW --fail-above 5``, ``report
NEW``, ``accept NEW --rules RULES`` (and ``accept --json``), and prints per command the wall
time, the child's peak resident memory (measured by /usr/bin/time) and its exit
status, and the growth exponent of time between sizes (log time / log points; 1 is linear).

``--pairs-nodes 1024`` builds a pairs folder instead (issue 42, the fleet report): the first
``--pair-rounds`` rounds of every-pair placement (round-robin, as ``placement: pairs``) over that
many nodes, all_reduce at 4 sizes, one node 40 % slower with every partner, one link 2x slower, and
GPU health records (health.jsonl, through the real writer) in which one node has an XID 79 and one
a PCIe link at Gen3 x8; then it times ``report`` on it (``--keep DIR`` keeps the folder and the
report, whose HTML a browser can open).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from commbench.runfolder import COLUMNS, RunFolder  # noqa: E402
from commbench.runfolder import files  # noqa: E402

OPS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "broadcast": 1.0}   # op -> bus factor
SIZES_BYTES = [1 << e for e in range(3, 28)]                                             # 8 B .. 128 MiB
POINTS_PER_HOST = len(OPS) * len(SIZES_BYTES)
RANKS, ITERS = 2, 10                                                                     # 20 samples per point
SLOW_HOST_EVERY = 200          # one host in this many is slow
SLOW_HOST_FACTOR = 1.3
REGRESSED = ("all_gather", SIZES_BYTES[10:13])   # NEW: 2x slower here, on every host
RULES = """\
rules:
  require_all_ok: true
  localize: {min_excess_pct: 20, min_share: 0.6, z_threshold: 3.5}
  checks:
    - name: allreduce-busbw-large
      select: {op: all_reduce, size_bytes: {min: 1MiB}}
      metric: busbw_gbps
      aggregate: median
      op: ">="
      value: 5
    - name: small-latency
      select: {size_bytes: {max: 4KiB}}
      metric: time_us
      aggregate: median
      op: "<="
      value: 100
"""


def model_time_us(op: str, size_bytes: int) -> float:
    """A latency + size / bandwidth model (about 8 us, 40 GB/s of bus bandwidth)."""
    return 8.0 + size_bytes * OPS[op] / 40e3


def host_names(n_hosts: int) -> list[str]:
    return [f"node{i:04d}" for i in range(n_hosts)]


def slow_hosts(n_hosts: int) -> set[int]:
    """One host in SLOW_HOST_EVERY (the middle one of each stretch; of all hosts, when fewer)."""
    middle = min(SLOW_HOST_EVERY // 2, n_hosts // 2)
    return {i for i in range(n_hosts) if i % SLOW_HOST_EVERY == middle}


def case_id(host: str, op: str, size_bytes: int) -> str:
    return hashlib.sha1(f"{host}|{op}|{size_bytes}".encode()).hexdigest()[:12]


def build_folder(path: Path, n_points: int, seed: int, regressed: bool) -> None:
    """One synthetic per-node run folder of ``n_points`` points, written through RunFolder."""
    rng = np.random.default_rng(seed)
    hosts = host_names(max(1, n_points // POINTS_PER_HOST))
    folder = RunFolder(path)
    folder.create(resume=False)
    lines, samples = [], []
    for h_index, host in enumerate(hosts):
        slow = SLOW_HOST_FACTOR if h_index in slow_hosts(len(hosts)) else 1.0
        for op in OPS:
            for size in SIZES_BYTES:
                factor = slow * (2.0 if regressed and op == REGRESSED[0] and size in REGRESSED[1] else 1.0)
                times = model_time_us(op, size) * factor * rng.lognormal(0.0, 0.03, size=(RANKS, ITERS))
                cid = case_id(host, op, size)
                lines.append(json.dumps(_row(cid, host, op, size, times.max(axis=0))))
                samples += [{"case_id": cid, "rank": r, "host": host, "gpu": r, "iteration": i,
                             "time_us": round(float(times[r, i]), 3)} for r in range(RANKS) for i in range(ITERS)]
        samples = _flush(folder, samples)
    _write_rows(folder, path, lines, samples)
    folder.write_meta({"suite": "fleet-scale", "hosts": hosts, "started_utc": "2026-12-07T00:00:00Z",
                       "synthetic": "benchmarks/fleet_scale.py"})
    (path / "suite.yaml").write_text(RULES)


def _flush(folder, samples: list, at_least: int = 200_000) -> list:
    """Append the samples once there are ``at_least`` of them (memory stays bounded); what is left."""
    if samples and len(samples) >= at_least:
        folder.append_samples(samples)
        return []
    return samples


def _write_rows(folder, path: Path, lines: list[str], samples: list) -> None:
    """The last samples, then the rows: results.jsonl, and results.csv the writer makes from it."""
    _flush(folder, samples, at_least=1)
    files.append(path, "results.jsonl", ("\n".join(lines) + "\n").encode())
    folder.rewrite_csv()


def _row(cid: str, host: str, op: str, size_bytes: int, slowest_us: np.ndarray) -> dict:
    t = float(np.median(slowest_us))
    algbw = size_bytes / (t * 1e3)
    row = {c: None for c in COLUMNS}
    row.update(suite="fleet-scale", bench="node-collectives", case_id=cid, family="collectives", op=op,
               backend="nccl", variant="default", dtype="float32", size_bytes=size_bytes,
               count=size_bytes // 4, world_size=RANKS, num_nodes=1, ranks_per_node=RANKS, in_place=False,
               warmup=2, iters=ITERS, timing="events", time_us=round(t, 3),
               time_us_min=round(float(slowest_us.min()), 3),
               time_us_p90=round(float(np.percentile(slowest_us, 90)), 3),
               time_us_max=round(float(slowest_us.max()), 3), algbw_gbps=round(algbw, 6),
               busbw_gbps=round(algbw * OPS[op] * (RANKS - 1) / RANKS, 6), wrong=0, status="ok", reason="",
               log="logs/launch-0.log", host=host, hosts=host)
    return row


PAIR_SIZES = [1 << 16, 1 << 20, 1 << 24, 1 << 27]   # 64 KiB .. 128 MiB
PAIR_ITERS = 5


def pair_faults(hosts: list[str], rounds: list) -> dict:
    """The pairs folder's faults: a slow node, a slow link (a pair of the measured rounds whose
    two nodes are neither), a node with an XID, one with its PCIe link trained down."""
    slow_node, xid, pcie = hosts[len(hosts) // 10], hosts[len(hosts) // 3], hosts[len(hosts) // 2]
    link = next(p for p in rounds[min(2, len(rounds) - 1)] if not {slow_node, xid, pcie} & set(p))
    return {"slow_node": slow_node, "link": tuple(link), "xid": xid, "pcie": pcie}


def build_pairs_folder(path: Path, n_nodes: int, n_rounds: int, seed: int = 3) -> dict:
    """A synthetic pairs run folder over ``n_nodes`` hosts (``n_rounds`` rounds of disjoint pairs)."""
    from commbench.analysis.accept.simulate import health_records
    from commbench.runfolder.health_files import append_health
    from commbench.sysinfo.hosts import round_robin_pairs

    rng = np.random.default_rng(seed)
    hosts = host_names(n_nodes)
    rounds = round_robin_pairs(hosts)[:n_rounds]
    faults = pair_faults(hosts, rounds)
    folder = RunFolder(path)
    folder.create(resume=False)
    lines, samples = [], []
    for pair in (p for rnd in rounds for p in rnd):
        factor = (1.4 if faults["slow_node"] in pair else 1.0) * (2.0 if tuple(pair) == faults["link"] else 1.0)
        for size in PAIR_SIZES:
            times = model_time_us("all_reduce", size) * factor * rng.lognormal(0.0, 0.03, size=(2, PAIR_ITERS))
            cid = case_id(",".join(pair), "all_reduce", size)
            row = _row(cid, pair[0], "all_reduce", size, times.max(axis=0))
            row.update(bench="pairs", world_size=2, num_nodes=2, ranks_per_node=1, hosts=",".join(pair),
                       host=None, iters=PAIR_ITERS)
            lines.append(json.dumps(row))
            samples += [{"case_id": cid, "rank": r, "host": pair[r], "gpu": 0, "iteration": i,
                         "time_us": round(float(times[r, i]), 3)} for r in range(2) for i in range(PAIR_ITERS)]
        samples = _flush(folder, samples)
    _write_rows(folder, path, lines, samples)
    records = [r for i, h in enumerate(hosts) for r in health_records(
        h, {faults["xid"]: "xid", faults["pcie"]: "pcie"}.get(h, "none"), launch_id=i)]
    append_health(path, [{**r, "schema": 1, "time_utc": "2026-12-07T00:00:00+00:00", "launch_hosts": [r["host"]]}
                         for r in records])
    folder.write_meta({"suite": "fleet-pairs", "hosts": hosts, "started_utc": "2026-12-07T00:00:00Z",
                       "synthetic": "benchmarks/fleet_scale.py --pairs-nodes"})
    return faults


def time_pairs_report(work: Path, n_nodes: int, n_rounds: int) -> dict:
    """Build (unless there) the pairs folder and time `report` on it."""
    folder = work / f"pairs-{n_nodes}x{n_rounds}"
    t0 = time.perf_counter()
    if not (folder / "results.csv").exists():
        work.mkdir(parents=True, exist_ok=True)
        faults = build_pairs_folder(folder, n_nodes, n_rounds)
        (work / f"pairs-{n_nodes}x{n_rounds}.faults.json").write_text(json.dumps(faults))
    print(f"# pairs folder {folder}: ready in {time.perf_counter() - t0:.1f} s", flush=True)
    out = work / f"report-pairs-{n_nodes}x{n_rounds}"
    out.mkdir(exist_ok=True)
    load = os.getloadavg()[0]
    r = timed([sys.executable, "-m", "commbench", "report", str(folder), "--out", str(out / "report.html")])
    print(f"  report {r['wall_s']:7.2f} s  {r['cpu_s']:7.2f} s CPU  {r['peak_mib']:7.0f} MiB  exit {r['rc']}  "
          f"(load {load:.2f} before, {os.getloadavg()[0]:.2f} after)  {out / 'report.html'}", flush=True)
    if r["rc"] != 0:
        print("    " + r["tail"].replace("\n", "\n    "))
    return {"load": load, **r}


def timed(argv: list[str]) -> dict:
    """Run one command as a child; wall seconds, CPU seconds (user + system: on a shared machine
    the wall time grows with the others' load, the CPU time much less), its peak RSS (MiB) and exit
    status. Peak and CPU are /usr/bin/time's: the command's own process, not this one's memory
    copied at fork."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as rss_file:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-o", rss_file.name, "-f", "%M %U %S", *argv], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wall_s = time.perf_counter() - start
        peak_kib, user_s, sys_s = rss_file.read().strip().splitlines()[-1].split()
    return {"wall_s": wall_s, "cpu_s": float(user_s) + float(sys_s), "peak_mib": int(peak_kib) / 1024.0,
            "rc": proc.returncode, "tail": proc.stdout.decode(errors="replace")[-600:]}


def commands(work: Path) -> dict[str, list[str]]:
    cb = [sys.executable, "-m", "commbench"]
    base, new, rules = str(work / "base"), str(work / "new"), str(work / "rules.yaml")
    return {
        "compare": cb + ["compare", base, new, "--fail-above", "5"],
        "report": cb + ["report", new, "--out", str(work / "out" / "report.html")],
        "accept": cb + ["accept", new, "--rules", rules, "--out", str(work / "out" / "accept.html")],
        "accept --json": cb + ["accept", new, "--rules", rules, "--out", str(work / "out" / "accept-j.html"),
                               "--json", str(work / "out" / "accept.json")],
    }


def exponent(sizes: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) against log(points)."""
    if len(sizes) < 2:
        return math.nan
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--keep", type=Path, default=None, help="build the folders here and keep them")
    ap.add_argument("--only", nargs="+", default=None, help="command names to time (default: all)")
    ap.add_argument("--pairs-nodes", type=int, default=None, help="build a pairs folder over this many nodes "
                    "and time `report` on it (instead of the per-node folders)")
    ap.add_argument("--pair-rounds", type=int, default=64, help="rounds of disjoint pairs in the pairs folder")
    args = ap.parse_args(argv)
    if args.pairs_nodes:
        with tempfile.TemporaryDirectory() as tmp:
            time_pairs_report(args.keep or Path(tmp), args.pairs_nodes, args.pair_rounds)
        return
    results: dict[str, list[dict]] = {}
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    print(f"# commbench {rev.stdout.strip() or '?'}, {os.cpu_count()} CPUs, load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        top = args.keep or Path(tmp)
        for n in args.points:
            work = top / f"fleet-{n}"
            t0 = time.perf_counter()
            if not (work / "new" / "results.csv").exists():
                work.mkdir(parents=True, exist_ok=True)
                build_folder(work / "base", n, seed=1, regressed=False)
                build_folder(work / "new", n, seed=2, regressed=True)
                (work / "rules.yaml").write_text(RULES)
            (work / "out").mkdir(exist_ok=True)
            print(f"# {n} points: folders ready in {time.perf_counter() - t0:.1f} s "
                  f"(samples.csv {(work / 'new' / 'samples.csv').stat().st_size / 2**20:.0f} MiB)", flush=True)
            for name, cmd in commands(work).items():
                if args.only and name not in args.only:
                    continue
                load = os.getloadavg()[0]   # the machine is shared: say how busy it was
                r = timed(cmd)
                results.setdefault(name, []).append({"points": n, "load": load, **r})
                print(f"  {name:14s} {r['wall_s']:7.2f} s  {r['cpu_s']:7.2f} s CPU  {r['peak_mib']:7.0f} MiB  "
                      f"exit {r['rc']}  "
                      f"(load {load:.2f} before, {os.getloadavg()[0]:.2f} after)", flush=True)
                if r["rc"] not in (0, 1):
                    print("    " + r["tail"].replace("\n", "\n    "))
    print(table(results, args.points))


def table(results: dict[str, list[dict]], points: list[int]) -> str:
    """Markdown: per command, per size 'wall s / CPU s / peak MiB / exit status (load average
    before)', and the growth exponent of wall and of CPU time, over all sizes and over the last two."""
    head = ("| command | " + " | ".join(f"{n:,} points: wall s / CPU s / MiB / exit (load)" for n in points)
            + " | exponent wall: all / last two | exponent CPU: all / last two |")
    lines = [head, "|" + " --- |" * (len(points) + 3)]
    for name, rows in results.items():
        cells = [f"{r['wall_s']:.2f} / {r['cpu_s']:.2f} / {r['peak_mib']:.0f} / {r['rc']} ({r['load']:.1f})"
                 for r in rows]
        sizes = [r["points"] for r in rows]
        exps = []
        for key in ("wall_s", "cpu_s"):
            times = [r[key] for r in rows]
            exps.append(f"{exponent(sizes, times):.2f} / {exponent(sizes[-2:], times[-2:]):.2f}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " | " + " | ".join(exps) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
