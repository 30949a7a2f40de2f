"""The terminal at 80 columns and in batch logs: names a user types are never cut, the progress
line keeps its counts and ETA, and redirected output has one line per Case and no ANSI codes."""
from __future__ import annotations

import io
import os
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


def test_summary_at_80_columns_keeps_op_names():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False)
    print_summary(console, load(RUNS / "cpu-base"), RUNS / "cpu-base", [])
    text = buf.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    for op in ("reduce_scatter", "all_reduce", "all_gather", "broadcast", "sendrecv"):
        assert f" {op} " in text


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
    line = [ln for ln in buf.getvalue().splitlines() if "3/152" in ln]
    assert line and "ETA" in line[0] and len(line[0]) <= 80, buf.getvalue()


def test_not_a_terminal_one_line_per_case_no_ansi():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False)
    display = RunDisplay(console, total=2, enabled=True, by_id={"c": _Case()})
    assert not display.live
    with display:
        for status in ("ok", "failed"):
            display.event({"event": "start", "case_id": "c"})
            display.event({"event": "done", "case_id": "c", "status": status})
    out = buf.getvalue().splitlines()
    assert len(out) == 2 and out[0].startswith("[1/2] ok ") and out[1].startswith("[2/2] failed ")
    assert "reduce_scatter mpi float32 4KiB" in out[0] and "ETA" in out[1] and "\x1b" not in buf.getvalue()


def test_case_lines_count_and_eta():
    got = []
    lines = CaseLines(4, got.append)
    lines.case_done("a", "ok")
    assert got[0].startswith("[1/4] ok      a (0:00:00 elapsed, ETA 0:00:00")


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
    assert res.stdout.count("commbench: 2 ok, 0 skipped") == 1 and "\x1b" not in res.stdout
