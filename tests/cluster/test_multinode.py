"""commbench across the nodes of a network-namespace cluster (tests/cluster/netns-cluster.sh).

Ranks start through Open MPI's launch agent inside the named node, talk over the bridge, and
the rows, samples and accept verdicts must say where they ran and which node or link is bad.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from tests.cluster.testbed import ROOT, ClusterUnavailable, commbench

pytestmark = pytest.mark.cluster

TWIN = ROOT / "suites" / "acceptance-multinode-cpu.yaml"
PAIR_BENCHES = ["--only", "pair-latency", "--only", "pair-bandwidth"]
SLOW_RATE_MBIT = 100  # 10x below the cluster's 1 Gbit/s links
SLOW_DELAY_US = 200


def _load(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    from commbench.runfolder.reader import load_run

    run = load_run(run_dir)
    return run.results, run.samples


def _rx_bytes(node_veth: str) -> int:
    return int(Path(f"/sys/class/net/{node_veth}/statistics/rx_bytes").read_text())


def _accept(cluster, run_dir: Path, tmp_path: Path) -> tuple[int, str, ET.Element]:
    junit = tmp_path / "accept.xml"
    out = cluster.run(commbench("accept", str(run_dir), "--junit", str(junit)), timeout=120)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return out.returncode, out.stdout + out.stderr, ET.parse(junit).getroot()


def _failures(junit: ET.Element) -> dict[str, str]:
    return {case.get("name"): case.find("failure").get("message")
            for case in junit.iter("testcase") if case.find("failure") is not None}


def _run_pairs(cluster, out: Path, rng) -> tuple[int, str]:
    """The pairwise benches, with the nodes in a seeded order: other rounds, another launch order."""
    order = ",".join(rng.sample(cluster.nodes, len(cluster.nodes)))
    res = cluster.run(["env", f"COMMBENCH_HOSTS={order}",
                       *commbench("run", str(TWIN), *PAIR_BENCHES, "--out", str(out), "--quiet")])
    return res.returncode, res.stdout + res.stderr


def test_agent_starts_ranks_in_their_node_and_traffic_crosses_the_bridge(healthy):
    from commbench.launch.mpiexec import find_mpiexec

    probe = ("import json, socket; from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
             "h = socket.gethostname(); a = np.ones(1 << 20); b = np.empty_like(a); c.Allreduce(a, b); "
             "print(json.dumps([c.rank, h, socket.gethostbyname(h), float(b[0])]), flush=True)")
    before = {n: _rx_bytes(f"{n}h") for n in healthy.nodes}
    res = healthy.run([find_mpiexec(), "--allow-run-as-root", "-n", "4", "--map-by", "ppr:1:node",
                       "--bind-to", "none", sys.executable, "-c", probe], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    ranks = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("[")]
    assert sorted(r[1] for r in ranks) == healthy.nodes  # one rank per node, named as the node
    assert all(addr == healthy.address(host) for _, host, addr, _ in ranks)
    assert all(total == 4.0 for *_, total in ranks)
    # 8 MiB per rank went over each node's link, not through shared memory
    assert all(_rx_bytes(f"{n}h") - before[n] > 4 << 20 for n in healthy.nodes)


def test_quickstart_runs_across_four_nodes(healthy, tmp_path):
    out = tmp_path / "quick"
    res = healthy.run(commbench("run", str(ROOT / "suites" / "quickstart.yaml"), "--set", "ranks=4",
                                "--set", "ranks_per_node=1", "--set", "sizes=[64B,64KiB]", "--set", "iters=3",
                                "--set", "warmup=1", "--out", str(out), "--quiet"))
    assert res.returncode == 0, res.stdout + res.stderr
    df, samples = _load(out)
    assert set(df.backend) == {"mpi", "gloo"} and (df.status == "ok").all()
    assert (df.num_nodes == 4).all() and (df.world_size == 4).all()
    assert sorted(samples.host.unique()) == healthy.nodes
    assert json.loads((out / "run.json").read_text())["hosts"] == healthy.nodes


def test_healthy_acceptance_passes_and_placements_run_where_they_say(healthy, tmp_path):
    junit = tmp_path / "accept.xml"
    res = healthy.run(commbench("accept", str(TWIN), "--junit", str(junit)), timeout=600, cwd=tmp_path)
    run_dir = next((tmp_path / "results").glob("*-acceptance-multinode-cpu"))
    assert res.returncode == 0, res.stdout + res.stderr + str(_failures(ET.parse(junit).getroot()))
    df, samples = _load(run_dir)
    assert (df.status == "ok").all()
    where = samples.groupby("case_id").host.agg(lambda h: ",".join(sorted(set(h))))
    per_node = df[df.bench == "node-allreduce"]
    assert sorted(per_node.host.unique()) == healthy.nodes
    assert (per_node.num_nodes == 1).all() and (per_node.world_size == 2).all()
    assert (where[per_node.case_id].values == per_node.host.values).all()  # both ranks on that node
    pairs = df[df.bench.str.startswith("pair-")]
    assert pairs.hosts.nunique() == 6 and (pairs.num_nodes == 2).all()
    assert (where[pairs.case_id].values == pairs.hosts.values).all()  # one rank on each node of the pair
    assert _failures(ET.parse(junit).getroot()) == {}


@pytest.mark.parametrize("kind", ["rate", "delay"])
def test_a_slow_node_is_named(healthy, tmp_path, rng, kind):
    bad = rng.choice(healthy.nodes)
    try:
        healthy.slow(bad, **({"rate_mbit": SLOW_RATE_MBIT} if kind == "rate" else {"delay_us": SLOW_DELAY_US}))
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    rc, log = _run_pairs(healthy, tmp_path / "run", rng)
    assert rc == 0, log  # slow, not broken: every row is measured
    rc, text, junit = _accept(healthy, tmp_path / "run", tmp_path)
    failures = _failures(junit)
    blame = [name for name in failures if name.startswith(("bad node", "bad links"))]
    assert rc == 1 and blame == [f"bad node {bad}"], text
    assert bad in failures[f"bad node {bad}"]


def test_a_slow_link_is_named(healthy, tmp_path, rng):
    a, b = sorted(rng.sample(healthy.nodes, 2))
    healthy.slow_link(a, b, rate_mbit=SLOW_RATE_MBIT)
    rc, log = _run_pairs(healthy, tmp_path / "run", rng)
    assert rc == 0, log
    rc, text, junit = _accept(healthy, tmp_path / "run", tmp_path)
    blame = [name for name in _failures(junit) if name.startswith(("bad node", "bad links"))]
    assert rc == 1 and blame == [f"bad links {a}-{b}"], text


def test_a_node_that_dies_mid_run_fails_its_rows_and_the_suite_goes_on(healthy, tmp_path, rng):
    victim = rng.choice(healthy.nodes)
    out = tmp_path / "run"
    proc = healthy.popen(commbench("run", str(TWIN), "--only", "pair-bandwidth", "--out", str(out), "--quiet"))
    try:
        _kill_when_its_launch_runs(healthy, out, victim)
        log, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, log
    df, _ = _load(out)
    with_victim = df[df.hosts.str.split(",").apply(lambda h: victim in h)]
    others = df.drop(with_victim.index)
    assert others.hosts.nunique() == 3 and (others.status == "ok").all()  # the suite went on
    failed = with_victim[with_victim.status != "ok"]
    assert failed.hosts.nunique() == 3 and set(failed.status) <= {"failed", "timeout"}
    assert all(f"lost {victim}" in reason for reason in failed.reason)  # the row names the dead node
    rc, text, junit = _accept(healthy, out, tmp_path)
    assert rc == 1 and f"bad node {victim}" in _failures(junit), text


def _kill_when_its_launch_runs(cluster, run_dir: Path, victim: str, timeout_s: float = 300) -> None:
    """Kill ``victim`` once a Case of the first launch placed on it has started."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            plan = json.loads((run_dir / "plan.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.2)
            continue
        launch = next(item for item in plan["launches"] if victim in item["hosts"])
        progress = run_dir / "logs" / f"launch-{launch['launch_id']}.progress.jsonl"
        if progress.exists() and '"start"' in progress.read_text():
            cluster.kill(victim)
            return
        time.sleep(0.2)
    raise AssertionError(f"no launch on {victim} started within {timeout_s} s")
