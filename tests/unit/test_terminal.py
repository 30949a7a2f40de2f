"""The terminal at 80 columns and in batch logs: names a user types are never cut, the progress
line keeps its counts and ETA, and redirected output has one line per Case and no ANSI codes."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from commbench.families import all_families
from commbench.runfolder.reader import load
from commbench.suite import BENCH_KEYS
from commbench.ui import CaseLines, RunDisplay, print_summary
from tests.conftest import needs_mpi

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "tests" / "fixtures" / "runs"


def _cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "commbench", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, check=False)


def test_list_at_80_columns_cuts_no_name():
    res = _cli("list", env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in res.stdout
    words = set(res.stdout.replace("│", " ").replace(",", " ").split())
    for fam in all_families().values():
        assert {f"params.{p}" for p in fam.params} <= words, fam.name
        assert set(fam.ops) <= words and set(fam.backends) <= words
    assert set(BENCH_KEYS) <= words
    assert "\x1b" not in res.stdout                       # a pipe gets no colour codes


def _summary(df, unstable=None, width=80) -> str:
    buf = io.StringIO()
    print_summary(Console(file=buf, width=width, force_terminal=False), df, RUNS / "x", [], unstable=unstable)
    return buf.getvalue()


def test_summary_at_80_columns_keeps_op_names_and_never_wraps_a_row():
    df = load(RUNS / "cpu-base")
    text = _summary(df)
    lines = text.splitlines()
    assert "…" not in text and max(map(len, lines)) <= 80
    firsts = [line.split()[0] for line in lines if line.split()]
    for op in ("reduce_scatter", "all_reduce", "all_gather", "broadcast", "sendrecv"):
        assert op in firsts
    groups = df.groupby(["op", "backend", "variant"]).ngroups
    assert sum(f in set(df["op"]) for f in firsts) == groups   # one line per group: none wrapped


def test_summary_says_how_many_points_were_unstable_and_why():
    from commbench.analysis.finish import _unstable
    from commbench.analysis.report.tables import unstable

    df = load(RUNS / "cpu-base").copy()
    df.loc[df.index[:5], "time_us_p90"] = df.loc[df.index[:5], "time_us"] * 2   # 5 slow tails
    count, rule = _unstable(df)
    assert count == len(unstable(df)) >= 5 and "1.25x the median" in rule
    text = _summary(df, unstable=(count, rule))
    assert f"{count} of {len(df)} ok points unstable: p90 time above 1.25x the median" in text
    assert max(map(len, text.splitlines())) <= 80
    assert "no unstable points" in _summary(df, unstable=(0, rule))


def _training_rows():
    import pandas as pd

    base = {"suite": "training", "bench": "fsdp", "family": "training", "op": "fsdp", "backend": "nccl",
            "variant": "default", "dtype": "bfloat16", "status": "ok", "reason": "", "busbw_gbps": 1.0,
            "time_us_p90": 1.0}
    return pd.DataFrame([{**base, "size_bytes": 221184, "time_us": 900.0, "step_us": 900.0,
                          "exposed_comm_us": 90.0, "overlap_pct": 80.0},
                         {**base, "size_bytes": 442368, "time_us": 1200.0, "step_us": 1200.0,
                          "exposed_comm_us": 300.0, "overlap_pct": 60.0}])


def test_a_training_summary_shows_step_time_and_the_stored_sizes_not_a_busbw():
    text = _summary(_training_rows())
    assert "216KiB-432KiB" in text and "step 900.0 us" in text and "overlap 80%" in text
    assert "GB/s" not in text and "1MiB" not in text


def test_headline_takes_the_columns_the_row_has():
    from commbench.ui import headline

    assert headline({"status": "ok", "time_us": 12.34, "busbw_gbps": 4.567}) == "12.3 us, busbw 4.57 GB/s"
    assert headline({"status": "ok", "time_us": 900, "step_us": 900.0, "exposed_comm_us": 90.0,
                     "overlap_pct": 80.0, "busbw_gbps": 3.0}) == "step 900.0 us; exposed 90.0 us, overlap 80%"
    assert headline({"status": "ok", "layer_us": 250.0, "dispatch_us": 60.0, "expert_us": 100.0,
                     "combine_us": 70.0}) == "layer 250.0 us (dispatch 60.0 us, experts 100.0 us, combine 70.0 us)"
    # a step split from its timeline: idle too; a two-batch layer also says what overlap hid
    assert headline({"status": "ok", "step_us": 900.0, "exposed_comm_us": 90.0, "overlap_pct": 80.0,
                     "idle_us": 10.0}) == "step 900.0 us; exposed 90.0 us, overlap 80%, idle 10.0 us"
    # the timed step leads; a profiled step that differs from it is named, with the critical path's shares
    assert headline({"status": "ok", "time_us": 880.0, "step_us": 900.0, "compute_share_pct": 88.9,
                     "exposed_comm_us": 90.0, "exposed_share_pct": 10.0, "overlap_pct": 80.0, "idle_us": 10.0,
                     "idle_share_pct": 1.1}) == ("step 880.0 us; profiled step 900.0 us: compute 89%, "
                                                 "exposed 90.0 us (10%), overlap 80%, idle 10.0 us (1%)")
    assert headline({"status": "ok", "layer_us": 250.0, "step_us": 260.0, "dispatch_us": 60.0, "expert_us": 100.0,
                     "combine_us": 70.0, "exposed_comm_us": 40.0, "overlap_pct": 69.2, "idle_us": 5.0,
                     "tbo_hidden_us": 60.0, "tbo_gain_pct": 46.2}) == (
        "layer 250.0 us (dispatch 60.0 us, experts 100.0 us, combine 70.0 us); profiled step 260.0 us: "
        "exposed 40.0 us, overlap 69%, idle 5.00 us, two-batch hid 60.0 us (46%)")
    assert headline({"status": "ok", "time_us": 2.0, "latency_p50_us": 1.5,
                     "latency_p99_us": 3.25}) == "p50 1.50 us, p99 3.25 us"
    assert headline({"status": "skipped", "reason": "nccl backend needs a GPU"}) == "nccl backend needs a GPU"
    assert headline({"status": "wrong", "time_us": 5.0, "busbw_gbps": None, "wrong": 3}) == "5.00 us, 3 wrong"


def test_a_case_line_names_the_size_the_row_stored():
    from commbench.ui import describe_case

    class Step(_Case):
        size_bytes = 1 << 20   # the suite's nominal size; the family stored the bytes a step moves

        def param(self, name):
            return None

    assert " 216KiB [" in describe_case(Step(), {"size_bytes": 221184}) and "1MiB" not in describe_case(
        Step(), {"size_bytes": 221184})
    assert " 1MiB [" in describe_case(Step())


class _Case:
    bench, op, backend = "mpi-out-of-place-with-a-long-name", "reduce_scatter", "mpi"
    dtype, size_bytes = "float32", 4096
    variant = "NCCL_ALGO=Ring,NCCL_PROTO=Simple"


def test_progress_line_at_80_columns_keeps_counts_and_eta():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    display = RunDisplay(console, total=152, enabled=True, by_id={"c": _Case()})
    assert display.live
    display.event({"event": "start", "case_id": "c"})
    for _ in range(3):
        display.event({"event": "done", "case_id": "c", "status": "ok"})
    table = display.progress.make_tasks_table(display.progress.tasks)
    console.print(table)
    line = [ln for ln in buf.getvalue().splitlines() if "3/152" in ln and not ln.startswith("[")]
    assert line and "ETA" in line[0] and len(line[0]) <= 80, buf.getvalue()


def test_a_waves_line_names_the_search_wave_and_phase_and_the_launches_in_flight():
    from commbench.launch.waves import WaveState

    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, color_system=None)
    display = RunDisplay(console, total=4, enabled=True, by_id={"c": _Case()})
    plain, search = WaveState(index=1, total=5), WaveState(index=0, total=1, search_wave=3, search_phase="match")
    for state, name in ((plain, "wave 2 of 5"), (search, "search wave 3 (match)")):
        display.wave(state, [7, 8, 9])
        state.in_flight.update({7, 8})
        display.event({"event": "start", "case_id": "c"})
        assert buf.getvalue().splitlines()[-1] == f"{name}: 3 launches at once"
        short = name.replace(" of ", "/")
        assert display.progress.tasks[0].description.startswith(f"[{short}, 2 in flight] "), short
    display.wave(WaveState(search_wave=4, search_phase="link"), [10])
    assert buf.getvalue().splitlines()[-1] == "search wave 4 (link): 1 launch"
    display.wave(None, [])
    display.event({"event": "start", "case_id": "c"})
    assert display.progress.tasks[0].description.startswith("mpi-out-of-place")
    display.grow(3)   # a search adds its next wave's Cases
    assert display.progress.tasks[0].total == 7 and display.lines.total == 7


def test_not_a_terminal_one_line_per_case_no_ansi():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False)
    rows = iter([{"case_id": "c", "status": "ok", "time_us": 3.5, "busbw_gbps": 1.25},
                 {"case_id": "c", "status": "failed", "reason": "ranks exited with status 1"}])
    display = RunDisplay(console, total=2, enabled=True, by_id={"c": _Case()}, row_of=lambda cid: next(rows))
    assert not display.live
    with display:
        for status in ("ok", "failed"):
            display.event({"event": "start", "case_id": "c"})
            display.event({"event": "done", "case_id": "c", "status": status})
    out = buf.getvalue().splitlines()
    assert len(out) == 2 and out[0].startswith("[1/2] ok ") and out[1].startswith("[2/2] failed ")
    assert "reduce_scatter mpi float32 4KiB" in out[0] and "ETA" in out[1] and "\x1b" not in buf.getvalue()
    assert ": 3.50 us, busbw 1.25 GB/s (" in out[0] and ": ranks exited with status 1 (" in out[1]


def test_case_lines_eta_counts_cases_not_start_up(monkeypatch):
    """30 s of start-up, then a Case a second: the ETA says seconds, not 30 s per Case."""
    import commbench.ui as ui

    clock = iter([0.0, 30.0, 31.0, 32.0, 33.0])
    monkeypatch.setattr(ui.time, "time", lambda: next(clock))
    got = []
    lines = CaseLines(4, got.append)
    for name in "abcd":
        lines.case_done(name, "ok", "1.00 us")
    assert got[0] == "[1/4] ok      a: 1.00 us (0:00:30 elapsed, ETA -:--:--)"
    assert got[1].endswith("(0:00:31 elapsed, ETA 0:00:02)")     # 1 s per Case, 2 Cases left
    assert got[3].endswith("(0:00:33 elapsed, ETA 0:00:00)")


SUITE = textwrap.dedent("""\
    name: t
    defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
    benchmarks:
      - {name: a, family: harness, ops: [barrier]}
      - {name: b, family: harness, ops: [barrier], sizes: [16B]}
    """)


@needs_mpi
def test_a_redirected_run_has_one_line_per_case_and_no_ansi(tmp_path):
    (tmp_path / "t.yaml").write_text(SUITE)
    res = _cli("run", tmp_path / "t.yaml", "--out", tmp_path / "run", env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\x1b" not in res.stdout + res.stderr
    assert res.stderr.count("[1/2] ok ") == 1 and res.stderr.count("[2/2] ok ") == 1, res.stderr
    assert len(re.findall(r"\]: [0-9.,]+ us", res.stderr)) == 2, res.stderr   # each line: the Case's time


@needs_mpi
def test_rank_zero_of_an_mpi_job_prints_the_progress(tmp_path):
    from commbench.launch.mpiexec import find_mpiexec

    (tmp_path / "t.yaml").write_text(SUITE)
    argv = [find_mpiexec(), "-n", "2", "--oversubscribe", "--allow-run-as-root", sys.executable, "-m",
            "commbench", "run", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "run")]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("[1/2] ok ") == 1 and res.stdout.count("[2/2] ok ") == 1, res.stdout
    assert len(re.findall(r"\]: [0-9.,]+ us", res.stdout)) == 2, res.stdout
    assert res.stdout.count("commbench: 2 ok, 0 skipped") == 1 and "\x1b" not in res.stdout


def test_list_filters_by_family_and_op():
    everything = _cli("list", env={"COLUMNS": "80"}).stdout
    one = _cli("list", "collectives", env={"COLUMNS": "80"})
    assert one.returncode == 0 and "family collectives" in one.stdout and "suite keys" not in one.stdout
    assert one.stdout.count("family ") == 1 and len(one.stdout.splitlines()) < len(everything.splitlines()) / 5
    by_op = _cli("list", "--op", "all_reduce", env={"COLUMNS": "80"})
    names = {line.split("family ", 1)[1].split(":")[0] for line in by_op.stdout.splitlines() if "family " in line}
    assert {"collectives", "allreduce"} <= names and "training" not in names
    for argv in (["list", "nope"], ["list", "--op", "nope"], ["list", "training", "--op", "all_reduce"]):
        res = _cli(*argv)
        assert res.returncode == 2 and "commbench: error:" in res.stderr, argv
