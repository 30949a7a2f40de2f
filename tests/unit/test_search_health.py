"""placement: search and GPU health: a node whose health records fail (an XID, a new double-bit ECC
error, a PCIe link trained down) is named bad in the wave that showed it, without a confirming wave,
and leaves the search; its group's failure blames no partner. The planner alone, then a search run
for real through the orchestrator (launches stood in for, health.jsonl written by the real writer
from NVML snapshots through the stand-in pynvml), then accept's verdict on that folder."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from commbench.placement.search_plan import SearchPlanner
from tests.unit.health_snapshots import gpu, snapshot, write_launch

HOSTS = [f"h{i:02d}" for i in range(13)]


def _play(planner: SearchPlanner, fails, sick: dict[str, str]) -> list[list[tuple]]:
    """Run a search: a group fails when ``fails(group)``; ``sick`` hosts fail health in any launch."""
    waves = []
    while (wave := planner.next_wave()) is not None:
        waves.append(wave)
        seen = {h: why for g in wave for h in g if h in sick for why in [sick[h]]}
        planner.observe({g: not fails(g) for g in wave}, seen)
    return waves


def test_a_node_failing_health_is_named_in_the_first_wave_and_never_placed_again():
    p = SearchPlanner(HOSTS, seed=3)
    waves = _play(p, lambda g: False, {"h04": "GPU 1 launch 4: XID 79 (GPU has fallen off the bus)"})
    [f] = p.findings()
    assert (f.level, f.name, f.confidence, f.cause) == ("node", "h04", "bad", "health")
    assert "wave 0 (alone)" in f.evidence and "XID 79" in f.evidence and "without a confirming wave" in f.evidence
    assert not [g for w in waves[1:] for g in w if "h04" in g]   # out of the search after the first wave
    assert p.summary()["bad"] == ["h04"] and not p.summary()["suspect"]


def test_the_group_a_sick_node_fails_blames_none_of_its_partners():
    """The sick node is also slow (its PCIe link trained down): its groups fail, yet only it is named."""
    p = SearchPlanner(HOSTS, seed=5)
    _play(p, lambda g: "h02" in g, {"h02": "GPU 0 launch 0: PCIe link trained down: width x8 (max x16)"})
    assert [(f.name, f.cause) for f in p.findings()] == [("h02", "health")]


def test_a_sick_node_found_late_is_named_then_and_a_slow_network_beside_it_still_found():
    """Health seen only in a later wave (an XID during a group): named in that wave; the slow network
    of another node is still named by its timings."""
    p = SearchPlanner(HOSTS, seed=7)
    waves = []
    while (wave := p.next_wave()) is not None:
        waves.append((p.phase, wave))
        sick = {"h09": "XID 48"} if p.phase == "match" else {}
        p.observe({g: not ("h06" in g and len(g) > 1) for g in wave},
                  {h: w for h, w in sick.items() if any(h in g for g in wave)})
    named = {(f.name, f.cause, f.level) for f in p.findings()}
    assert ("h09", "health", "node") in named and ("h06", "", "network") in named
    assert len(named) == 2
    first_match = next(i for i, (phase, _w) in enumerate(waves) if phase == "match")
    assert not [g for _p, w in waves[first_match + 1:] for g in w if "h09" in g]


def test_the_replay_names_what_the_run_named_and_accept_keeps_one_check_per_name():
    from commbench.analysis.accept.outcome import Verdict
    from commbench.analysis.accept.search_check import merge_health, replay, search_verdicts

    p = SearchPlanner(HOSTS, seed=1)
    record = {"nodes": HOSTS, "settings": {"seed": 1}, "waves": [], "done": True}
    while (wave := p.next_wave()) is not None:
        sick = {"h11": "GPU 0 launch 11: 1 new double-bit ECC error(s) (limit 0)"} if p.waves == 0 else {}
        record["waves"].append({"wave": p.waves, "phase": p.phase, "unhealthy": sick,
                                "groups": [{"hosts": list(g), "passed": True} for g in wave]})
        p.observe({g: True for g in wave}, sick)
    summary, why = replay(record)
    assert why == "" and summary["bad"] == ["h11"]
    verdicts = search_verdicts(summary)
    assert [v.check for v in verdicts[1:]] == ["bad node h11 (health)"]
    own = Verdict("bad node h11 (health)", "node", False, "1 problem(s)", "healthy GPUs", "GPU 0 launch 11: ...")
    merged = merge_health(verdicts, [own])
    assert [v.check for v in merged].count("bad node h11 (health)") == 1
    assert "the search named it too" in own.reason


@pytest.fixture
def health_templates(tmp_path, monkeypatch):
    """health.jsonl records of one launch on a healthy node and on a node with an XID, written by
    the real writer through the stand-in pynvml (made once, copied per launch by the fake one)."""
    from commbench.runfolder.health_files import load_health

    out = {}
    for name, snap in (("ok", snapshot([gpu(), gpu()])),
                       ("xid", snapshot([gpu(), gpu()], [{"gpu": 1, "type": "xid", "data": 79}]))):
        folder = tmp_path / f"health-{name}"
        folder.mkdir()
        write_launch(monkeypatch, folder, "template", snap)
        out[name] = load_health(folder)
    return out


SICK, SLOW_NET = "h03", "h05"


def test_a_search_run_names_the_sick_node_after_its_first_wave_and_accept_names_it_once(
        tmp_path, monkeypatch, health_templates):
    from commbench.launch import group
    from commbench.runfolder.health_files import append_health
    from commbench.cli import cli
    from tests.unit.run_helpers import run_suite_file
    from tests.unit import test_search_run as bed

    monkeypatch.setattr(bed, "HUNG", "none")   # this bed: one sick node, one slow network, no hung node
    monkeypatch.setattr(bed, "SLOW_NET", SLOW_NET)
    monkeypatch.setattr(bed, "LINK", ("none-a", "none-b"))
    calls, fabric = [], None
    fabric = bed.fabric_launch(calls)

    def launch(run_dir, task, env, timeouts, **kw):
        for host in task["hosts"]:   # each node's rank 0 stores its records as the launch runs
            recs = health_templates["xid" if host == SICK else "ok"]
            append_health(run_dir, [{**r, "host": host, "launch_id": task["launch_id"],
                                     "launch_hosts": list(task["hosts"])} for r in recs])
        return fabric(run_dir, task, env, timeouts, **kw)

    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(HOSTS))
    monkeypatch.setattr(group, "run_launch", launch)
    suite = tmp_path / "s.yaml"
    suite.write_text(bed.SUITE.replace("SEED", "4"))
    out = run_suite_file(suite, tmp_path / "run", show_progress=False)
    meta = json.loads((out / "run.json").read_text())
    [record] = meta["searches"]
    [(sick, why)] = record["waves"][0]["unhealthy"].items()
    assert sick == SICK and why.startswith("GPU 1 launch ") and "XID 79 (GPU has fallen off the bus" in why
    assert all("unhealthy" not in w for w in record["waves"][1:])
    assert not [h for h, _d in calls[len(HOSTS):] if SICK in h]   # never placed after the first wave
    assert SICK in record["bad"] and SLOW_NET in record["bad"] + record["suspect"]
    (tmp_path / "rules.yaml").write_text("rules:\n  - {name: any, select: {op: all_reduce}, metric: time_us, "
                                         "aggregate: median, op: '<=', value: 1.0e9}\n")
    res = CliRunner().invoke(cli, ["accept", str(out), "--rules", str(tmp_path / "rules.yaml"),
                                   "--out", str(tmp_path / "a.html"), "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 1, res.output
    checks = [c["check"] for c in json.loads((tmp_path / "a.json").read_text())["checks"]]
    assert checks.count(f"bad node {SICK} (health)") == 1
    assert [c for c in checks if SLOW_NET in c] and not [c for c in checks if c.startswith("bad") and
                                                         SICK not in c and SLOW_NET not in c]
