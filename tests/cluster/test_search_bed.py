"""placement: search across the nodes of a network-namespace cluster: real launches, wave by wave,
and accept naming the slow node's network from run.json (docs/accept.md, "Running a search")."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.runfolder.reader import load
from tests.cluster.testbed import ROOT, commbench

pytestmark = pytest.mark.cluster

SUITE = ROOT / "tests" / "cluster" / "suites" / "search-8nodes.yaml"


def test_search_names_a_slow_nodes_network_and_no_one_else(healthy, rng, tmp_path: Path):
    """Four nodes, one with a 10x slower link: alone it passes (one rank, no network); the
    matchings' pairs are compared with each other (from the second matching on, when 3 or more
    pairs have been measured), and pairs with proven-good partners confirm it."""
    slow = rng.choice(healthy.nodes)
    healthy.slow(slow, rate_mbit=100)
    out = tmp_path / "run"
    res = healthy.run(commbench("run", str(SUITE), "--out", str(out), "--quiet",
                                "--set", f"search={{seed: {rng.randrange(1000)}, metric: time_us_min, "
                                         "max_excess_pct: 100, min_share: 0.6}"), timeout=420)
    assert res.returncode == 0, res.stdout + res.stderr   # every row ok: slow is not broken
    record = json.loads((out / "run.json").read_text())["searches"][0]
    assert record["done"] and record["waves"][0]["phase"] == "alone"
    res = healthy.run(commbench("accept", str(out)), timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    named = [line.split()[:3] for line in res.stdout.splitlines() if line.startswith(("bad ", "suspect "))]
    assert named == [["bad", "network", slow]], res.stdout


def test_a_dead_nodes_launch_is_retried_once_then_fails_and_the_node_is_named(healthy, rng, tmp_path: Path):
    """A dead node's daemon never reports back: its launch is started twice (launch_retries: 1),
    then its rows fail with the launcher's message; the other nodes' launches start at once."""
    dead = rng.choice(healthy.nodes)
    healthy.kill(dead)
    out = tmp_path / "run"
    res = healthy.run(commbench("run", str(SUITE), "--out", str(out), "--quiet"), timeout=420)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "the launcher failed to start its ranks" in res.stderr and "retry 1 of 1" in res.stderr
    launches = json.loads((out / "run.json").read_text())["launches"]
    retried = [launch for launch in launches if launch.get("start_retries")]
    assert retried and all(launch["hosts"] == [dead] for launch in retried), launches
    assert all(len(launch["start_retries"]) == 1 and launch["status"] == "failed" for launch in retried)
    df = load(out)
    failed = df[df.status != "ok"]
    assert len(failed) and (failed.hosts == dead).all(), failed[["hosts", "status", "reason"]]
    assert failed.reason.str.startswith("launcher failed to start ranks (2 attempts): ").all(), failed.reason
    res = healthy.run(commbench("accept", str(out)), timeout=120)
    named = [line.split()[:3] for line in res.stdout.splitlines() if line.startswith(("bad ", "suspect "))]
    assert res.returncode == 1 and named == [["bad", "node", dead]], res.stdout
