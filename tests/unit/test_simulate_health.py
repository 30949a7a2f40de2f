"""The acceptance simulator's health faults (analysis/accept/simulate.py): an XID, a new double-bit
ECC error and a PCIe link trained down (also slow), mixed with slow nodes, GPUs and networks, are
named in the first wave, through the real health judgement, by the one planner the launcher uses."""
from __future__ import annotations

import pytest

from commbench.analysis.accept import simulate
from commbench.sysinfo.health_judge import unhealthy_hosts


def test_each_health_fault_fails_the_judgement_and_a_healthy_record_passes():
    for fault, words in (("xid", "XID 79"), ("dbe", "1 new double-bit ECC error"),
                         ("pcie", "PCIe link trained down: generation Gen3 (max Gen5)")):
        named = unhealthy_hosts(simulate.health_records("n7", fault, launch_id=4))
        assert list(named) == ["n7"] and words in named["n7"] and "GPU 1 launch 4" in named["n7"]
    assert unhealthy_hosts(simulate.health_records("n7", "none", launch_id=4)) == {}


@pytest.mark.parametrize("peers", [False, True])
def test_health_faults_mixed_with_slow_parts_are_named_in_the_first_wave_at_1024_nodes(peers):
    for seed in range(4):
        r = simulate.run_one(1024, 3, seed, {"health": 4}, peers=peers)
        assert (r["health"], r["health_named"], r["health_first_wave"], r["health_wrong"]) == (4, 4, 4, 0), r
        assert r["true"] == r["bad"] == 3 and r["named"] == 3, r   # the slow parts are still all found


def test_the_pcie_fault_is_slow_too_and_still_named_for_its_health_alone():
    fab = simulate.make_fabric(64, 0, seed=2, health=12)
    slow = [n for n, kind in fab.health.items() if kind == "pcie"]
    assert slow and all(fab.intra_rate[fab.nodes.index(n)] < 0.8 for n in slow)
    r = simulate.run_one(64, 0, 2, {"health": 12})
    assert r["health_named"] == r["health_first_wave"] == 12 and r["named"] == 0


def test_without_health_faults_no_one_is_named_for_health_and_the_table_says_so():
    rows = simulate.table(sizes=(64,), bads=(1,), seeds=3, fabric_kw={"health": 2})
    assert rows[0]["health"] == rows[0]["health_named"] == rows[0]["health_first_wave"] == 6
    assert "| in wave 0 |" in simulate.markdown(rows)
    plain = simulate.table(sizes=(64,), bads=(1,), seeds=3)
    assert plain[0]["health"] == plain[0]["health_named"] == 0 and "health" not in simulate.markdown(plain)
