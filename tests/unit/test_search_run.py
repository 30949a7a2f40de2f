"""placement: search run for real through the orchestrator, on a fabric model standing in for the
launches (run_launch faked: rows from the hosts a launch got); the judge on its own; a wave's time
limit."""
from __future__ import annotations

import io
import json
import textwrap
import time

import pytest
from rich.console import Console

from tests.unit.test_waves import pseudo_hosts
from tests.conftest import needs_mpi
from commbench.placement.search_judge import GroupJudge

HOSTS = [f"h{i:02d}" for i in range(13)]
HUNG, SLOW_NET, LINK = "h01", "h05", ("h07", "h08")

SUITE = """\
name: srch
wave_timeout: 30s
defaults: {ranks: 1, warmup: 1, iters: 3, sizes: [1KiB, 64KiB]}
benchmarks:
  - {name: net, family: collectives, ops: [all_reduce], backends: [mpi], placement: search,
     search: {seed: SEED}}
"""


def _row(case, status="ok", time_us=None, reason=""):
    from commbench.runfolder.schema import case_row

    row = case_row(case, world_size=case.ranks, num_nodes=len(case.hosts), ranks_per_node=1, log="", status=status,
                   reason=reason)
    row.update(time_us=time_us, wrong=0 if status == "ok" else None)
    return row


def fabric_launch(calls):
    """A run_launch that stores the rows a fabric would give: a hung node never ends (until the
    wave's deadline), a slow network triples a group's time, as does a bad link with both ends in."""
    from commbench.families.base import Case
    from commbench.launch.supervise import LaunchOutcome
    from commbench.runfolder import RunFolder
    from commbench.runfolder.writers_lock import SHARED_VAR

    def launch(run_dir, task, env, timeouts, on_event=None, allow_multicast=False, keep_fds=(), **kw):
        calls.append((tuple(task["hosts"]), kw.get("deadline")))
        stored = json.loads((run_dir / "plan.json").read_text())["cases"]
        plan = {c["case_id"]: Case.from_json(c["case"]) for c in stored}
        hosts, ids = set(task["hosts"]), task["case_ids"]
        if HUNG in hosts:
            while time.time() < kw["deadline"]:
                time.sleep(0.02)
            return LaunchOutcome(-9, ids[0], None, ids[:1], [], 0.5)
        slow = (SLOW_NET in hosts and len(hosts) > 1) or set(LINK) <= hosts
        writer = RunFolder(run_dir, shared=env.get(SHARED_VAR) == "1")   # as a rank 0 would be
        for cid in ids:
            case = plan[cid]
            t_us = (3.0 if slow else 1.0) * (10 + case.size_bytes / 1024) * len(hosts)
            writer.append_samples([{"case_id": cid, "rank": r, "host": h, "gpu": 0, "iteration": 0, "time_us": t_us}
                                   for r, h in enumerate(task["hosts"])])
            writer.append_row(_row(case, time_us=t_us))
        return LaunchOutcome(0, None, None, list(ids), list(ids), 0.01)

    return launch


def _seed_meeting_the_link():
    from commbench.placement.search_plan import SearchPlanner

    for seed in range(500):
        p = SearchPlanner(HOSTS, seed=seed)
        p.observe({g: g != (HUNG,) for g in p.next_wave()})
        for _ in range(2):   # the hung node again, twice
            p.observe({g: False for g in p.next_wave()})
        if any(set(LINK) == set(g) for g in p.next_wave()):
            return seed
    raise AssertionError("no seed pairs the link in the first matching")


@pytest.fixture
def search_run(tmp_path, monkeypatch):
    from commbench.launch import group
    from tests.unit.run_helpers import run_suite_file

    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(HOSTS))
    monkeypatch.setenv("COMMBENCH_WAVE_TIMEOUT", "0.5s")
    calls = []
    monkeypatch.setattr(group, "run_launch", fabric_launch(calls))
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("SEED", str(_seed_meeting_the_link())))
    shown = io.StringIO()   # the progress lines as a batch log gets them
    out = run_suite_file(suite, tmp_path / "run", console=Console(file=shown, force_terminal=False, width=200),
                                show_progress=True)
    return suite, out, calls, shown.getvalue()


def test_search_names_the_hung_node_the_slow_network_and_the_bad_link(search_run):
    import pandas as pd

    from commbench.analysis.accept.search_check import search_checks

    _suite, out, calls, shown = search_run
    meta = json.loads((out / "run.json").read_text())
    [record] = meta["searches"]
    assert record["done"] and record["bench"] == "net"
    verdicts = search_checks(meta)
    assert verdicts[0].check == "strategy search (net)" and not verdicts[0].passed
    assert f"{len(record['waves'])} waves" in verdicts[0].measured
    assert {v.check for v in verdicts[1:]} == {f"bad node {HUNG}", f"bad network {SLOW_NET}",
                                               f"bad link {'-'.join(LINK)}"}
    rows = pd.read_csv(out / "results.csv")
    assert {"hosts", "wave", "search_phase"} <= set(rows.columns)
    assert set(rows.search_phase) >= {"alone", "again", "match", "confirm", "link"}
    hung = rows[rows.hosts == HUNG]
    assert set(hung.status) == {"timeout"} and hung.reason.str.contains("time limit").all()
    assert (rows[rows.hosts != HUNG].status == "ok").all()   # the hung launch stopped no other
    assert len({d for _h, d in calls}) == len(record["waves"])   # one deadline a wave
    launches = meta["launches"]
    assert {l["search_phase"] for l in launches} >= {"alone", "match"}
    # the display names each wave by the search's number and phase, never the suite plan's one wave,
    # and counts the Cases each wave adds
    named = [line for line in shown.splitlines() if "wave" in line and not line.startswith("[")]
    assert named[0] == f"search wave 0 (alone): {len(HOSTS)} launches at once", shown
    assert len(named) == len(record["waves"]) and not [n for n in named if " of " in n]
    assert [n.split(" (")[0] for n in named] == [f"search wave {w['wave']}" for w in record["waves"]]
    counts = [line[1:line.index("]")].split("/") for line in shown.splitlines() if line.startswith("[")]
    assert counts and all(int(i) <= int(n) for i, n in counts)


def test_resume_replays_the_search_and_runs_only_what_is_missing(search_run, monkeypatch):
    from commbench.launch import group
    from tests.unit.run_helpers import run_suite_file

    suite, out, first, _shown = search_run
    before = json.loads((out / "run.json").read_text())["searches"][0]
    calls = []
    monkeypatch.setattr(group, "run_launch", fabric_launch(calls))
    run_suite_file(suite, out, resume=True, show_progress=False)
    after = json.loads((out / "run.json").read_text())["searches"][0]
    assert after["waves"] == before["waves"]
    assert {h for h, _d in calls} == {(HUNG,)}   # only its timed-out Cases run again


def test_dry_run_prints_the_first_waves_and_the_worst_case(tmp_path, monkeypatch):
    from commbench.launch.waves import price
    from commbench.suite import load_suite

    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(HOSTS))
    (tmp_path / "s.yaml").write_text(SUITE.replace("SEED", "1"))
    suite = load_suite(tmp_path / "s.yaml", gpu_count=0)
    [launch] = suite.launches
    assert launch.search and launch.hosts == tuple(HOSTS)
    text = "\n".join(price(suite.launches, "10s"))
    assert "search wave 0 (alone): 13 launches" in text and "search wave 1 (match): 6 launches" in text
    assert "at most about 13 waves" in text and "projected wall time 2m10s" in text


@pytest.mark.parametrize("bad, msg", [("{group_size: 0}", "whole number >= 1"), ("{nope: 1}", "unknown setting"),
                                      ("{min_share: 2}", "0..1"), ("{metric: 3}", "column")])
def test_search_settings_are_checked(tmp_path, monkeypatch, bad, msg):
    from commbench.errors import SuiteError
    from commbench.suite import load_suite

    monkeypatch.setenv("COMMBENCH_HOSTS", "a,b,c")
    (tmp_path / "s.yaml").write_text(SUITE.replace("{seed: SEED}", bad))
    with pytest.raises(SuiteError, match=msg):
        load_suite(tmp_path / "s.yaml", gpu_count=0)


def _rows(group, t, status="ok", point=1024):
    return [{"bench": "b", "op": "x", "backend": "mpi", "variant": "default", "dtype": "float32",
             "size_bytes": point, "status": status, "time_us": t, "wrong": 0}]


def test_the_judge_fails_rows_not_ok_and_groups_slower_than_their_peers():
    judge = GroupJudge(max_excess_pct=50)
    out = judge.judge({("a", "b"): _rows(2, 10.0), ("c", "d"): _rows(2, 11.0), ("e", "f"): _rows(2, 30.0),
                       ("g", "h"): _rows(2, 10.0, status="timeout")})
    assert out[("a", "b")][0] and out[("c", "d")][0]
    assert not out[("e", "f")][0] and "worse than the best groups" in out[("e", "f")][1]
    assert not out[("g", "h")][0] and "timeout" in out[("g", "h")][1]
    later = judge.judge({("a", "e"): _rows(2, 25.0)})   # a later wave is compared with the earlier groups
    assert not later[("a", "e")][0]


def test_the_judge_with_too_few_peers_judges_by_status_only():
    out = GroupJudge().judge({("a", "b", "c", "d"): _rows(4, 10.0), ("e", "f", "g", "h"): _rows(4, 99.0)})
    assert all(ok for ok, _why in out.values())
    assert "too few groups" in out[("e", "f", "g", "h")][1]


def test_with_too_few_peers_of_its_size_a_group_is_compared_with_larger_ones():
    out = GroupJudge().judge({("a", "b"): _rows(2, 10.0), ("c", "d"): _rows(2, 30.0), ("e", "f", "g"): _rows(3, 12.0)})
    assert out[("a", "b")][0] and out[("e", "f", "g")][0]
    assert not out[("c", "d")][0]


def test_gpu_values_rate_each_gpu_of_a_node_alone_over_its_cases():
    import pandas as pd

    from commbench.placement.search_judge import gpu_values

    samples = pd.DataFrame([{"case_id": n + c, "host": n, "gpu": g, "iteration": i,
                             "time_us": t * (3 if (n, g) == ("b", 1) else 1)}
                            for n in "ab" for g in (0, 1) for c, t in (("x", 10.0), ("y", 40.0)) for i in range(3)])
    values = gpu_values(samples, {"a": {"ax", "ay"}, "b": {"bx", "by"}})
    assert values["a"] == pytest.approx((2e4, 2e4)) and values["b"][1] == pytest.approx(values["b"][0] / 3)


@needs_mpi
def test_search_on_local_pseudo_hosts_names_the_host_that_cannot_start(tmp_path, monkeypatch):
    """Three names of this machine (Open MPI starts each locally) and a host that does not exist:
    `run` drives the search through real launches, `accept` names the bad host from run.json. No
    matchings: Open MPI sees the three names as one node, so a group of them cannot start."""

    from click.testing import CliRunner

    from commbench.cli import cli

    pseudo_hosts(monkeypatch)
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent("""\
        name: s
        wave_timeout: 120s
        defaults: {ranks: 1, warmup: 1, iters: 5, sizes: [1KiB]}
        benchmarks:
          - {name: net, family: collectives, ops: [all_reduce], backends: [mpi], placement: search,
             search: {matchings: 0}}
        rules:
          checks:
            - {name: ran, select: {bench: net}, metric: time_us, aggregate: max, op: "<=", value: 1e9, min_rows: 0}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 1, result.output
    meta = json.loads((out / "run.json").read_text())
    [record] = meta["searches"]
    assert [w["phase"] for w in record["waves"]] == ["alone", "again", "again"]
    result = CliRunner().invoke(cli, ["accept", str(out)])
    assert result.exit_code == 1, result.output
    assert "bad node no-such-host.invalid" in result.output and "3 waves, 6 launches" in result.output
    assert "suspect" not in result.output.replace("0 suspect", "")


def test_search_settings_under_defaults_serve_the_searching_benchmarks_only(tmp_path, monkeypatch):
    from commbench.errors import SuiteError
    from commbench.suite import load_suite

    monkeypatch.setenv("COMMBENCH_HOSTS", "a,b,c")
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""\
        name: s
        defaults: {ranks: 1, sizes: [1KiB], search: {group_size: 4}}
        benchmarks:
          - {name: alone, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
          - {name: net, family: collectives, ops: [all_reduce], backends: [mpi], placement: search}
        """))
    suite = load_suite(tmp_path / "s.yaml", gpu_count=0)
    assert [dict(l.search).get("group_size") for l in suite.launches] == [None, None, None, 4]
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""\
        name: s
        benchmarks:
          - {name: alone, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node,
             search: {seed: 1}}
        """))
    with pytest.raises(SuiteError, match="applies to placement: search only"):
        load_suite(tmp_path / "s.yaml", gpu_count=0)
