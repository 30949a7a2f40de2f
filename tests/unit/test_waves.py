"""Waves: the planner packs launches with disjoint hosts, resumes a partial wave with its missing
launches only, runs a wave's jobs at the same time, and prices a schedule."""
import textwrap
import threading
import time

import pytest

from commbench.launch.waves import (Estimate, estimate_from_run, pending_waves, plan_waves, run_wave,
                                    schedule_lines)
from commbench.suite import load_suite
from commbench.suite.launches import Launch
from tests.conftest import needs_mpi


def _launch(i, hosts, cases=("x",)):
    return Launch(launch_id=i, ranks=len(hosts) or 1, ranks_per_node=1, env=(), variant="default",
                  case_ids=tuple(f"{c}{i}" for c in cases), hosts=tuple(hosts))


SUITE = """\
name: w
defaults: {ranks: 1, sizes: [1KiB]}
benchmarks:
  - {name: node, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
  - {name: pair, family: collectives, ops: [sendrecv], backends: [mpi], placement: pairs}
  - {name: free, family: collectives, ops: [all_reduce], backends: [mpi], ranks: 2}
"""


@pytest.mark.parametrize("n", [2, 5, 8])
def test_suite_plans_one_node_wave_then_one_wave_per_round(tmp_path, monkeypatch, n):
    hosts = [f"h{i}" for i in range(n)]
    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(hosts))
    (tmp_path / "w.yaml").write_text(SUITE)
    suite = load_suite(tmp_path / "w.yaml", gpu_count=8)
    waves = plan_waves(suite.launches)
    rounds = n - 1 if n % 2 == 0 else n
    assert len(waves) == 1 + rounds + 1
    assert sorted(l.hosts for l in waves[0]) == [(h,) for h in hosts]
    pairs = [p for w in waves[1:-1] for p in (l.hosts for l in w)]
    assert sorted(pairs) == sorted((a, b) for i, a in enumerate(hosts) for b in hosts[i + 1:])
    for wave in waves:   # no host twice in one wave
        used = [h for l in wave for h in l.hosts]
        assert len(used) == len(set(used))
    assert [l.hosts for l in waves[-1]] == [()]   # the unplaced benchmark runs alone
    by_id = {c.case_id: c for c in suite.cases}   # the rows' `wave` column is the benchmark's round
    for i, wave in enumerate(waves[1:-1]):
        assert {by_id[l.case_ids[0]].param("wave") for l in wave} == {i}
    assert {by_id[l.case_ids[0]].param("wave") for l in waves[0]} == {0}
    assert by_id[waves[-1][0].case_ids[0]].param("wave") is None


def test_unplaced_launches_stay_one_after_another():
    launches = [_launch(i, ()) for i in range(4)]
    assert [[l.launch_id for l in w] for w in plan_waves(launches)] == [[0], [1], [2], [3]]


def test_overlapping_hosts_open_a_new_wave():
    launches = [_launch(0, "ab"), _launch(1, "cd"), _launch(2, "ac"), _launch(3, ()), _launch(4, "e")]
    assert [[l.launch_id for l in w] for w in plan_waves(launches)] == [[0, 1], [2], [3], [4]]


def test_resume_mid_wave_runs_only_the_missing_launches():
    launches = [_launch(0, "a"), _launch(1, "b"), _launch(2, "c"), _launch(3, "ab"), _launch(4, "ac")]
    done = {"x0", "x2"}   # wave 0 was interrupted after launches 0 and 2 stored their rows
    left = pending_waves(launches, done)
    assert [(i, [l.launch_id for l in w]) for i, w in left] == [(0, [1]), (1, [3]), (2, [4])]
    assert pending_waves(launches, {"x0", "x1", "x2", "x3"}) == [(2, [launches[4]])]


def test_run_wave_runs_jobs_together_and_keeps_failures_apart():
    started = threading.Barrier(3, timeout=5)   # fails unless all three run at the same time

    def run_one(job):
        started.wait()
        if job == "bad":
            raise RuntimeError("this launch broke")
        time.sleep(0.05)
        return job.upper()

    out = run_wave(["a", "bad", "c"], run_one)
    assert [r.value for r in out] == ["A", None, "C"]
    assert isinstance(out[1].error, RuntimeError) and out[0].error is None


def test_a_wave_counts_its_launches_in_flight_even_when_it_has_one():
    from commbench.launch.waves import WaveState

    for jobs in (["a"], ["a", "b"]):
        state, seen = WaveState(), []
        run_wave(jobs, lambda job: seen.append(set(state.in_flight)), state=state, key=str)
        assert all(len(s) >= 1 for s in seen) and state.in_flight == set(), (jobs, seen)
    with pytest.raises(RuntimeError):   # a launch alone still raises as before, and leaves the count
        run_wave(["a"], lambda job: (_ for _ in ()).throw(RuntimeError("broke")), state=state, key=str)
    assert state.in_flight == set()


def test_schedule_prices_waves_against_one_after_another():
    launches = [_launch(i, h, cases=("x", "y")) for i, h in enumerate(["a", "b", "c", "d"])]
    lines = schedule_lines(launches, Estimate(15.0, {}, "--launch-cost 15s"))
    assert lines[0].startswith("wave 0: 4 launches, 2 Cases per launch")
    assert "projected wall time 0m15s (one launch after another: 1m00s" in lines[-1]


def test_estimate_from_a_previous_run():
    meta = {"launches": [{"log": "logs/launch-0.log", "wall_s": 12.0}, {"log": "logs/launch-1.log", "wall_s": 9.0},
                         {"log": "logs/launch-2.log", "wall_s": 30.0}]}
    rows = [{"case_id": "c0", "log": "logs/launch-0.log", "time_us": 1e6, "warmup": 1, "iters": 1}]
    est = estimate_from_run(meta, rows, "run r")
    assert est.case_s == {"c0": 2.0} and est.launch_s == 10.0   # median of 10, 9, 30


@pytest.mark.parametrize("launches", ['"x"', '[5]', '[{"log": "l", "wall_s": "abc"}]'])
def test_a_damaged_run_json_is_named_not_taken_for_a_bad_launch_cost(tmp_path, launches):
    from commbench.errors import RunFolderError
    from commbench.launch.waves import price

    (tmp_path / "run.json").write_text('{"launches": %s}' % launches)
    with pytest.raises(RunFolderError, match=r"run\.json: launches.* (is )?not a"):
        price([_launch(0, ["a"])], None, tmp_path)
    with pytest.raises(RunFolderError, match=r"run\.json"):   # with a good --launch-cost too
        price([_launch(0, ["a"])], "15s", tmp_path)


@pytest.mark.parametrize("cost,seconds", [("15s", 15), ("500ms", 0.5), ("2min", 120), ("0", 0), ("1.5h", 5400)])
def test_a_launch_cost_is_read_as_every_duration_is(cost, seconds):
    from commbench.launch.waves import price

    lines = price([_launch(0, ["a"])], cost)
    assert f"--launch-cost {cost} per launch" in " ".join(lines)
    with pytest.raises(ValueError):
        price([_launch(0, ["a"])], "fast")
    from commbench.units import parse_duration

    assert parse_duration(cost, allow_zero=True) == seconds


BAD_HOST = "no-such-host.invalid"


def pseudo_hosts(monkeypatch) -> list[str]:
    """Four "nodes" that are this machine under three names plus one that cannot resolve (skips
    without mpiexec); set as COMMBENCH_HOSTS and returned."""
    import socket

    from tests.conftest import has_mpiexec

    if not has_mpiexec():
        pytest.skip("no mpiexec/mpi4py on this machine")
    hosts = [socket.gethostname(), "localhost", "127.0.0.1", BAD_HOST]
    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(hosts))
    return hosts


def _launch_span(run, launch_id):
    """(when the launch was started: its task file written; its last progress event)."""
    import json

    events = [json.loads(line) for line in
              (run / "logs" / f"launch-{launch_id}.progress.jsonl").read_text().splitlines() if line.strip()]
    return (run / "logs" / f"launch-{launch_id}-try0.json").stat().st_mtime, max(e["t"] for e in events)


@needs_mpi
def test_per_node_wave_on_local_pseudo_hosts_runs_together_and_a_bad_host_fails_alone(tmp_path, monkeypatch):
    """Three names of this machine (Open MPI starts each locally) plus a host that does not exist:
    one wave of four launches; the three local ones overlap in time and succeed, the fourth fails
    with its own rows."""
    import json

    import pandas as pd
    from click.testing import CliRunner

    from commbench.cli import cli

    hosts = pseudo_hosts(monkeypatch)
    suite = tmp_path / "pn.yaml"
    suite.write_text(textwrap.dedent("""\
        name: pn
        defaults: {ranks: 1, warmup: 2, iters: 20, sizes: [1KiB, 64KiB, 1MiB]}
        benchmarks:
          - {name: node, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 1, result.output
    rows = pd.read_csv(out / "results.csv")
    assert set(rows.wave) == {0} and len(rows) == 12
    assert set(rows[rows.status == "failed"].hosts) == {"no-such-host.invalid"}
    assert set(rows[rows.status == "ok"].hosts) == set(hosts[:3])
    launches = json.loads((out / "run.json").read_text())["launches"]
    assert [l["wave"] for l in launches] == [0, 0, 0, 0]
    spans = [_launch_span(out, l["launch_id"]) for l in launches if l["status"] == "ok"]
    assert max(s for s, _ in spans) < min(e for _, e in spans)   # all three were in flight at once


def test_a_wave_time_limit_ends_a_hung_launch_as_its_own_timeout_rows(tmp_path, monkeypatch):
    """per_node over four hosts, one of which never ends: at the wave's limit its Cases become
    timeout rows saying so, the three others keep their ok rows, and the next benchmark runs."""
    import json

    import pandas as pd

    from commbench.launch import group
    from tests.unit.run_helpers import run_suite_file
    from tests.unit.test_search_run import HUNG, fabric_launch

    hosts = [HUNG, "h02", "h03", "h04"]
    monkeypatch.setenv("COMMBENCH_HOSTS", ",".join(hosts))
    monkeypatch.delenv("COMMBENCH_WAVE_TIMEOUT", raising=False)
    calls = []
    monkeypatch.setattr(group, "run_launch", fabric_launch(calls))
    (tmp_path / "w.yaml").write_text(textwrap.dedent("""\
        name: w
        wave_timeout: 0.5s
        defaults: {ranks: 1, sizes: [1KiB, 2KiB]}
        benchmarks:
          - {name: node, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
          - {name: pair, family: collectives, ops: [all_reduce], backends: [mpi], placement: pairs}
        """))
    t0 = time.time()
    out = run_suite_file(tmp_path / "w.yaml", tmp_path / "run", show_progress=False)
    rows = pd.read_csv(out / "results.csv")
    node = rows[rows.bench == "node"]
    assert set(node[node.hosts == HUNG].status) == {"timeout"} and len(node[node.hosts == HUNG]) == 2
    assert node[node.hosts == HUNG].reason.str.contains("wave's time limit").all()
    assert set(node[node.hosts != HUNG].status) == {"ok"}
    assert len(rows[rows.bench == "pair"]) == 12   # every pair round still ran
    assert {d for _h, d in calls if d} and time.time() - t0 < 30
    launches = json.loads((out / "run.json").read_text())["launches"]
    assert [l["status"] for l in launches if l["hosts"] == [HUNG]] == ["timeout"]


def test_only_the_ranks_of_a_concurrent_wave_are_told_the_folder_is_shared(tmp_path, monkeypatch):
    """per_node over four hosts runs as one wave: each launch's ranks lock their appends; with
    COMMBENCH_WAVES=0 the launches run one by one and none does."""
    from commbench.launch import group
    from tests.unit.run_helpers import run_suite_file
    from commbench.runfolder.writers_lock import SHARED_VAR
    from tests.unit.test_search_run import fabric_launch

    monkeypatch.setenv("COMMBENCH_HOSTS", "h02,h03,h04,h06")
    monkeypatch.delenv(SHARED_VAR, raising=False)
    fake, seen = fabric_launch([]), []

    def launch(run_dir, task, env, *a, **kw):
        seen.append(env.get(SHARED_VAR))
        return fake(run_dir, task, env, *a, **kw)

    monkeypatch.setattr(group, "run_launch", launch)
    (tmp_path / "w.yaml").write_text(textwrap.dedent("""\
        name: w
        defaults: {ranks: 1, sizes: [1KiB]}
        benchmarks:
          - {name: node, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
        """))
    run_suite_file(tmp_path / "w.yaml", tmp_path / "a", show_progress=False)
    assert seen == ["1"] * 4
    seen.clear()
    monkeypatch.setenv("COMMBENCH_WAVES", "0")
    run_suite_file(tmp_path / "w.yaml", tmp_path / "b", show_progress=False)
    assert seen == [None] * 4


def test_a_wave_time_limit_that_is_not_a_duration_names_the_line(tmp_path, monkeypatch):
    from commbench.errors import CommbenchError
    from commbench.suite import load_suite

    monkeypatch.delenv("COMMBENCH_WAVE_TIMEOUT", raising=False)
    suite = tmp_path / "w.yaml"
    body = "defaults: {ranks: 1, sizes: [1KiB]}\nbenchmarks:\n  - {name: a, family: harness, ops: [barrier]}\n"
    suite.write_text("name: w\nwave_timeout: soon\n" + body)
    with pytest.raises(CommbenchError, match=r"w.yaml:2: wave_timeout: bad duration"):
        load_suite(suite, gpu_count=0)
    monkeypatch.setenv("COMMBENCH_WAVE_TIMEOUT", "2m")
    assert load_suite(suite, gpu_count=0).settings.wave_timeout_s == 120.0   # the variable wins
    for bad in ("0s", "-5", "nan"):
        monkeypatch.setenv("COMMBENCH_WAVE_TIMEOUT", bad)
        with pytest.raises(CommbenchError, match="COMMBENCH_WAVE_TIMEOUT"):
            load_suite(suite, gpu_count=0)
