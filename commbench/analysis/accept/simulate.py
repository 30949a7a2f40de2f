"""A fabric model that plays the search planner's launches: how many waves, and are the names right.

Each node has GPUs (a rate each), an intra-node rate (NVLink, PCIe) and a network rate (its NIC,
cable and switch port), all near 1.0 (healthy spread ``spread``). A launch measures, per draw,
rate x lognormal noise (``noise``); a node alone is the min over its GPUs and intra-node rate, a
group of nodes also over each member's network rate. It passes when that min is at least
``floor`` (a suite floor at 85% of nominal), and any launch fails on its own with ``flake``
(a hang, a crash). ``b`` bad parts, each on a different node: a slow node, a slow GPU or a slow
network link, at ``bad_rate`` of nominal.

Health faults (``health`` of them, each on a node of its own, none of the slow ones): an XID 79 during
a launch, a new double-bit ECC error, or a PCIe link trained down to Gen3 x8 (that node is also
``pcie_rate`` slow: a narrow link shows in its timings). Every launch a faulty node is in stores
its GPU health records (start, end, the XID event) as a node's rank 0 would; they are judged by
the real health judgement (sysinfo/health_judge.py) and the hosts that fail are handed to the
planner, as launch/search_run.py does. The healthy nodes' records are not made (a healthy
record passes: tests/unit/test_health_accept.py): at 4,096 nodes they would cost more than the
rest of the simulation. The score says in which wave each health fault was named.

    python -m commbench.analysis.accept.simulate [--seeds 100] [--health 2] [--plot PNG]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from commbench.placement.search_judge import GroupJudge, compared
from commbench.placement.search_plan import Outcome, SearchPlanner
from commbench.sysinfo.health_judge import unhealthy_hosts

FAULTS = ("node", "gpu", "network")
HEALTH_FAULTS = ("xid", "dbe", "pcie")
SECONDS_PER_WAVE = 15.0   # a wave costs its slowest launch


@dataclass
class Fabric:
    nodes: list[str]
    gpu_rate: np.ndarray       # (N, G)
    intra_rate: np.ndarray     # (N,)
    net_rate: np.ndarray       # (N,)
    faults: dict[str, str]     # node -> 'node' | 'gpu k' | 'network'
    rng: np.random.Generator
    health: dict = None        # node -> 'xid' | 'dbe' | 'pcie' (its GPU health records fail)
    noise: float = 0.02
    floor: float = 0.85
    flake: float = 0.001


def make_fabric(n_nodes: int, bad: int, seed: int, gpus: int = 8, spread: float = 0.01,
                bad_rate: tuple[float, float] = (0.4, 0.75), health: int = 0, pcie_rate: float = 0.7,
                **kw) -> Fabric:
    rng = np.random.default_rng(seed)
    nodes = [f"n{i:04d}" for i in range(n_nodes)]
    gpu = 1.0 + spread * rng.standard_normal((n_nodes, gpus))
    intra = 1.0 + spread * rng.standard_normal(n_nodes)
    net = 1.0 + spread * rng.standard_normal(n_nodes)
    faults = {}
    for i in rng.choice(n_nodes, size=bad, replace=False):
        kind, rate = FAULTS[rng.integers(len(FAULTS))], rng.uniform(*bad_rate)
        if kind == "node":
            intra[i] = rate
        elif kind == "gpu":
            k = int(rng.integers(gpus))
            gpu[i, k] = rate
            kind = f"gpu {k}"
        else:
            net[i] = rate
        faults[nodes[i]] = kind
    sick = {}
    if health:
        free = [i for i in range(n_nodes) if nodes[i] not in faults]
        for i in rng.choice(free, size=min(health, len(free)), replace=False):
            sick[nodes[i]] = HEALTH_FAULTS[rng.integers(len(HEALTH_FAULTS))]
            if sick[nodes[i]] == "pcie":
                intra[i] *= pcie_rate
    return Fabric(nodes, gpu, intra, net, faults, rng, health=sick, **kw)


def health_records(node: str, fault: str, launch_id: int, gpus: int = 2) -> list[dict]:
    """The health.jsonl records one launch on ``node`` stores (start and end per GPU, events), with
    ``fault`` on its GPU 1: as health.jsonl's schema (docs/results.md) has them."""
    out = []
    for g in range(gpus):
        hit = g == 1
        for phase, t in (("start", 0.0), ("end", 60.0)):
            gen, width = (3, 8) if hit and fault == "pcie" else (5, 16)
            dbe = 1 if hit and fault == "dbe" and phase == "end" else 0
            out.append({"phase": phase, "host": node, "launch_id": launch_id, "attempt": 0, "gpu": g, "t": t,
                        "ecc": {"volatile_dbe": dbe, "aggregate_dbe": dbe, "volatile_sbe": 0},
                        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                        "pcie": {"gen": gen, "width": width, "gen_max": 5, "width_max": 16},
                        "throttle_ns": {r: 0 for r in ("sw_thermal", "hw_thermal", "hw_power_brake")}})
        if hit and fault == "xid":
            out.append({"phase": "event", "host": node, "launch_id": launch_id, "attempt": 0, "gpu": g, "t": 30.0,
                        "event": "xid", "xid": 79, "data": 79})
    return out


def wave_health(fab: Fabric, wave: list[tuple[str, ...]], first_launch: int) -> dict[str, str]:
    """The hosts of this wave whose stored health records fail, judged as a real search judges them."""
    records = [r for j, g in enumerate(wave) for n in g if n in (fab.health or {})
               for r in health_records(n, fab.health[n], first_launch + j)]
    return unhealthy_hosts(records) if records else {}


def play_wave(fab: Fabric, wave: list[tuple[str, ...]], index: dict[str, int], judge=None) -> dict:
    """Each group's Outcome: min over its members' parts with noise, against the floor; or, given
    the launcher's ``judge`` (placement/search_judge.py), one row per group (time 1/rate, a flaky
    launch failed) judged against the groups of its size, as a real search judges its rows."""
    rng, out = fab.rng, {}
    sizes = np.array([len(g) for g in wave])
    members = np.array([index[n] for g in wave for n in g])
    if len(np.unique(members)) != len(members):
        raise ValueError("the groups of a wave overlap: they cannot run at the same time")
    noisy_gpu = fab.gpu_rate[members] * rng.lognormal(0.0, fab.noise, (len(members), fab.gpu_rate.shape[1]))
    node_min = np.minimum(noisy_gpu.min(axis=1), fab.intra_rate[members] * rng.lognormal(0.0, fab.noise, len(members)))
    net = fab.net_rate[members] * rng.lognormal(0.0, fab.noise, len(members))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    alone_min = np.minimum.reduceat(node_min, starts)
    group_min = np.minimum.reduceat(np.minimum(node_min, net), starts)
    metric = np.where(sizes == 1, alone_min, group_min)
    flaked = rng.random(len(wave)) < fab.flake
    passed = (metric >= fab.floor) & ~flaked
    judged = judge.judge({g: [{"bench": "sim", "size_bytes": 0, "status": "failed" if flaked[j] else "ok",
                               "time_us": 1.0 / float(metric[j])}] for j, g in enumerate(wave)}) if judge else {}
    for j, g in enumerate(wave):
        gpu_values = tuple(np.minimum(noisy_gpu[starts[j]], fab.intra_rate[members[starts[j]]]).round(4)) \
            if len(g) == 1 else ()
        ok, why = judged.get(g, (bool(passed[j]), ""))
        out[g] = Outcome(bool(ok), gpu_values, compared(why) if judge else True)
    return out


def score(fab: Fabric, planner: SearchPlanner) -> dict:
    """Precision and recall of the named nodes, and whether each named part is the right one."""
    found = planner.findings()
    named = {n for f in found for n in f.nodes}
    truth = set(fab.faults)
    right_part = sum(1 for f in found if f.nodes[0] in truth and _part(f) == fab.faults[f.nodes[0]])
    sick = set(fab.health or {})
    by_health = {f.name: f for f in found if getattr(f, "cause", "") == "health"}
    first = sum(1 for n in sick & set(by_health) if planner.state[n].health_wave[0] == 0)
    return {"named": len(named - sick), "true": len((named - sick) & truth), "bad": len(truth),
            "right_part": right_part, "health": len(sick), "health_named": len(sick & set(by_health)),
            "health_first_wave": first, "health_wrong": len(set(by_health) - sick)}


def _part(f) -> str:
    return f.name.split(" ", 1)[1] if f.level == "gpu" else f.level


def run_one(n_nodes: int, bad: int, seed: int, fabric_kw: dict | None = None, peers: bool = False,
            **planner_kw) -> dict:
    """One search on a fabric; ``peers``: judged as the launcher judges (against the groups of the
    same size, slow at the floor's margin: 1/floor - 1), not against the floor."""
    fab = make_fabric(n_nodes, bad, seed, **(fabric_kw or {}))
    planner = SearchPlanner(fab.nodes, seed=seed, **planner_kw)
    index = {n: i for i, n in enumerate(fab.nodes)}
    judge = GroupJudge("time_us", (1.0 / fab.floor - 1.0) * 100.0, 0.5) if peers else None
    while (wave := planner.next_wave()) is not None:
        launch_id = planner.launches
        planner.observe(play_wave(fab, wave, index, judge), wave_health(fab, wave, launch_id))
    return {"waves": planner.waves, "launches": planner.launches, **score(fab, planner)}


def table(sizes=(64, 1024, 4096), bads=range(5), seeds: int = 100, seeds_large: int | None = None,
          fabric_kw: dict | None = None, peers: bool = False) -> list[dict]:
    rows = []
    for n in sizes:
        k = seeds_large if (seeds_large and n >= 4096) else seeds
        for b in bads:
            t0 = time.perf_counter()
            runs = [run_one(n, b, s, fabric_kw, peers) for s in range(k)]
            named = sum(r["named"] for r in runs)
            true = sum(r["true"] for r in runs)
            rows.append({"nodes": n, "bad": b, "seeds": k,
                         "waves_mean": float(np.mean([r["waves"] for r in runs])),
                         "waves_max": max(r["waves"] for r in runs),
                         "launches_mean": float(np.mean([r["launches"] for r in runs])),
                         "hours_max": max(r["waves"] for r in runs) * SECONDS_PER_WAVE / 3600,
                         "precision": true / named if named else float("nan"),
                         "recall": true / (b * k) if b else float("nan"),
                         "right_part": sum(r["right_part"] for r in runs) / (b * k) if b else float("nan"),
                         "seeds_naming_someone": sum(r["named"] > 0 for r in runs),
                         **{k: sum(r[k] for r in runs) for k in ("health", "health_named", "health_first_wave",
                                                                 "health_wrong")},
                         "cpu_s": round(time.perf_counter() - t0, 1)})
    return rows


def markdown(rows: list[dict]) -> str:
    health = any(r.get("health") for r in rows)
    head = ("| nodes | bad | seeds | waves mean | waves max | launches mean | hours (max) | precision | recall "
            "| right part | seeds naming someone |" + (" health faults | named (health) | in wave 0 | wrongly named "
                                                          "(health) |" if health else "")
            + "\n|" + " --- |" * (15 if health else 11))
    lines = [head]
    for r in rows:
        f = lambda v: "-" if v != v else f"{v:.3f}"   # noqa: E731  (nan -> '-')
        lines.append(f"| {r['nodes']} | {r['bad']} | {r['seeds']} | {r['waves_mean']:.1f} | {r['waves_max']} "
                     f"| {r['launches_mean']:.0f} | {r['hours_max']:.3f} | {f(r['precision'])} | {f(r['recall'])} "
                     f"| {f(r['right_part'])} | {r['seeds_naming_someone']} |"
                     + (f" {r['health']} | {r['health_named']} | {r['health_first_wave']} | {r['health_wrong']} |"
                        if health else ""))
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=90)
    for n in sorted({r["nodes"] for r in rows}):
        sub = [r for r in rows if r["nodes"] == n]
        ax.plot([r["bad"] for r in sub], [r["waves_max"] for r in sub], marker="o", label=f"search, N={n}")
        ax.plot([r["bad"] for r in sub], [max(1, r["bad"]) * np.log2(n) for r in sub], ls=":", color="grey")
    ax.set_xlabel("bad parts b")
    ax.set_ylabel("waves (max over seeds)")
    ax.set_title("search: waves to name b bad parts (dotted: b*log2 N)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--seeds-large", type=int, default=None, help="seeds at N >= 4096 (default: --seeds)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    ap.add_argument("--bad", type=int, nargs="+", default=list(range(5)), help="numbers of bad parts")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--noise", type=float, default=0.02, help="lognormal sigma of each draw")
    ap.add_argument("--flake", type=float, default=0.001, help="chance that a launch fails on its own")
    ap.add_argument("--floor", type=float, default=0.85, help="pass at this fraction of nominal")
    ap.add_argument("--bad-rate", type=float, nargs=2, default=(0.4, 0.75), help="a bad part's rate range")
    ap.add_argument("--health", type=int, default=0,
                    help="health faults per fabric (XID 79, a new double-bit ECC error, PCIe at Gen3 x8)")
    ap.add_argument("--plot", default=None, help="write a PNG of waves against b")
    ap.add_argument("--judge", choices=("floor", "peers"), default="floor",
                    help="floor: a group passes at --floor of nominal; peers: as the launcher judges rows, "
                         "against the groups of its size (placement/search_judge.py)")
    args = ap.parse_args(argv)
    fabric_kw = {"gpus": args.gpus, "noise": args.noise, "flake": args.flake, "floor": args.floor,
                 "bad_rate": tuple(args.bad_rate), "health": args.health}
    t0 = time.perf_counter()
    rows = table(args.sizes, args.bad, args.seeds, args.seeds_large, fabric_kw, args.judge == "peers")
    print(markdown(rows))
    print(f"\n{time.perf_counter() - t0:.0f} s of CPU time")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
