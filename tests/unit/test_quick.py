"""`commbench nccl OP ...`: nccl-tests' options become a suite, the run a normal run folder, and the
rows nccl-tests' table, column for column."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.nccl_tests.table import HEADER, fit, format_table
from commbench.analysis.quick import QuickArgs, suite_dict, write_suite
from commbench.cli import cli
from commbench.suite import load_suite
from tests.conftest import needs_mpi

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "nccl_tests" / "all_reduce_perf.txt"


def test_options_become_one_collectives_benchmark(tmp_path):
    bench = suite_dict(QuickArgs(op="all_reduce", min_bytes="8", max_bytes="1M", step_factor=4, iters=7,
                                 warmup=3, ranks=2, dtype="bf16", redop="max", graph=1))["benchmarks"][0]
    assert bench["family"] == "collectives" and bench["ops"] == ["all_reduce"] and bench["dtypes"] == ["bfloat16"]
    assert bench["sizes"] == {"min": 8, "max": 1 << 20, "factor": 4} and bench["ranks"] == 2
    assert (bench["iters"], bench["warmup"], bench["timing"]) == (7, 3, "graph")
    assert bench["params"] == {"in_place": [False, True], "reduce_op": "max"}
    s = load_suite(write_suite(QuickArgs(op="alltoall", backend="mpi", min_bytes="64", max_bytes="4K",
                                         step_factor=1, step_bytes="1K"), tmp_path))
    assert sorted({c.size_bytes for c in s.cases}) == [64, 64 + 1024, 64 + 2048, 64 + 3072]
    assert {c.param("in_place") for c in s.cases} == {False}   # alltoall has no in-place form
    assert {c.backend for c in s.cases} == {"mpi"} and s.launches[0].ranks == 2   # CPU default: 2 ranks


def test_bad_options_exit_2_before_anything_runs():
    for argv in (["nccl", "all_reduce", "-d", "double", "--backend", "mpi"],
                 ["nccl", "nope", "--backend", "mpi"],
                 ["nccl", "all_reduce", "-b", "1G", "-e", "8", "--backend", "mpi"]):
        res = CliRunner().invoke(cli, argv)
        assert res.exit_code == 2 and "commbench: error:" in res.output, (argv, res.output)


def test_without_a_gpu_the_nccl_backend_exits_2_and_says_what_to_type(monkeypatch):
    from commbench.sysinfo import gpus

    monkeypatch.setattr(gpus, "gpu_count", lambda: 0)
    res = CliRunner().invoke(cli, ["nccl", "all_reduce", "-b", "8", "-e", "8G"])
    assert res.exit_code == 2
    assert "needs a GPU" in res.output and "--backend mpi -g 2" in res.output


def _fixture_rows():
    """The first two rows of an nccl-tests all_reduce table, as commbench stores them."""
    rows = []
    for line in FIXTURE.read_text().splitlines():
        tok = line.split()
        if not tok or line.startswith("#"):
            continue
        for in_place, (t, alg, bus, wrong) in ((False, tok[5:9]), (True, tok[9:13])):
            rows.append({"op": "all_reduce", "dtype": "float32", "reduce_op": "sum", "in_place": in_place,
                         "size_bytes": int(tok[0]), "count": int(tok[1]), "status": "ok", "time_us": float(t),
                         "algbw_gbps": float(alg), "busbw_gbps": float(bus), "wrong": int(wrong)})
        if len(rows) == 4:
            return rows, [ln for ln in FIXTURE.read_text().splitlines() if ln.split()[:1] in (["8"], ["32"])]
    raise AssertionError("fixture has no rows")


def test_the_table_is_nccl_tests_own_layout():
    rows, expected = _fixture_rows()
    text = format_table(rows)
    fixture_header = [ln.rstrip() for ln in FIXTURE.read_text().splitlines() if "out-of-place" in ln
                      or ln.lstrip("#").split()[:2] in (["size", "count"], ["(B)", "(elements)"])]
    assert [ln.rstrip() for ln in HEADER.splitlines()] == fixture_header
    lines = text.splitlines()
    assert lines[3:5] == expected                                     # character for character
    assert lines[-2] == "# Out of bounds values : 0 OK"
    assert lines[-1].startswith("# Avg bus bandwidth    : 0")


def test_numbers_fit_their_columns_as_nccl_tests_prints_them():
    assert (fit(4034.9, 6), fit(12076.0, 6), fit(109601.0, 6), fit(2e6, 6)) == ("4034.9", " 12076", "109601",
                                                                                   " 2e+06")
    assert fit(float("nan"), 6) == "   N/A"


def test_a_side_not_measured_shows_n_a_and_its_reason():
    rows = [{"op": "sendrecv", "dtype": "float32", "in_place": False, "size_bytes": 4, "count": 1,
             "status": "skipped", "reason": "4 B is less than one float32 element per rank"}]
    text = format_table(rows)
    row = [ln for ln in text.splitlines() if not ln.startswith("#")][0].split()
    assert row[:5] == ["4", "1", "float", "none", "-1"] and row[5:] == ["N/A"] * 8
    assert "# 4B out-of-place: skipped: 4 B is less than one float32 element per rank" in text
    assert "Avg bus bandwidth    : N/A" in text


def _data_rows(stdout: str) -> list[list[str]]:
    return [ln.split() for ln in stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]


@needs_mpi
def test_cpu_run_inside_mpiexec_prints_the_table_and_writes_a_run_folder(tmp_path):
    from commbench.launch.mpiexec import find_mpiexec

    out = tmp_path / "run"
    argv = [find_mpiexec(), "-n", "2", "--oversubscribe", "--allow-run-as-root", sys.executable, "-m", "commbench",
            "nccl", "all_reduce", "--backend", "mpi", "-g", "2", "-b", "8", "-e", "64K", "-f", "8", "-n", "4",
            "-w", "1", "--out", str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stdout + res.stderr
    rows = _data_rows(res.stdout)
    assert [int(r[0]) for r in rows] == [8, 64, 512, 4096, 32768]   # one line per size, from rank 0 only
    for r in rows:
        assert len(r) == 13 and r[2:5] == ["float", "sum", "-1"]
        assert r[8] == "0" and r[12] == "0"                              # #wrong, out of place and in place
        assert int(r[1]) * 4 == int(r[0])                                # count of float elements
    assert res.stdout.count("# Avg bus bandwidth    : ") == 1 and "# Out of bounds values : 0 OK" in res.stdout
    assert (out / "results.csv").exists() and (out / "suite.yaml").exists() and (out / "report.html").exists()
    assert res.stdout.count("run folder: ") == 1


@needs_mpi
def test_cpu_run_started_by_commbench_on_gloo(tmp_path):
    res = CliRunner().invoke(cli, ["nccl", "alltoall", "--backend", "gloo", "-g", "2", "-b", "64", "-e", "4K",
                                   "-f", "64", "-n", "3", "-w", "1", "--quiet", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    rows = _data_rows(res.output)
    assert [r[0] for r in rows] == ["64", "4096"]
    assert all(r[8] == "0" and r[9:] == ["N/A"] * 4 for r in rows)      # alltoall has no in-place form
    assert "# in-place: N/A (alltoall has no in-place form" in res.output
    # the run folder is a normal one: `commbench run SUITE --resume` continues it
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "run" / "suite.yaml"), "--resume", "--quiet",
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output


def test_register_unalign_and_average_become_parameters():
    bench = suite_dict(QuickArgs(op="all_reduce", dtype="bf16", register=2, unalign=3, average=1))["benchmarks"][0]
    assert bench["params"] == {"in_place": [False, True], "reduce_op": "sum", "register": "window",
                               "offset_bytes": 6, "rank_time": "avg"}   # -u counts bf16 elements
    plain = suite_dict(QuickArgs(op="all_reduce"))["benchmarks"][0]["params"]
    assert set(plain) == {"in_place", "reduce_op"}   # defaults stay out of suite.yaml


def test_the_table_ends_with_each_bound_and_the_best_busbw_against_it():
    import json

    from commbench.analysis.quick import table_of

    links = json.loads((REPO / "tests" / "fixtures" / "links" / "8x-h100-nvswitch.json").read_text())["links"]
    rows = [{"op": "all_gather", "dtype": "float32", "size_bytes": s, "count": s // 32, "in_place": False,
             "status": "ok", "time_us": 10.0, "algbw_gbps": b / 0.875, "busbw_gbps": b, "wrong": 0,
             "world_size": 8, "num_nodes": 1, "ranks_per_node": 8, "family": "collectives", "backend": "nccl"}
            for s, b in ((1 << 20, 100.0), (1 << 30, 360.0))]
    text = table_of(rows, QuickArgs(op="all_gather"), links)
    last = text.splitlines()[-1]
    assert last.startswith("# Bound 1MiB..1GiB: 450 GB/s (nvlink4x18); best busbw 360.00 GB/s = 80.0% of it at 1GiB")
    none = table_of(rows, QuickArgs(op="all_gather"), None).splitlines()[-1]
    assert none.startswith("# Bound: none for 2 row(s): ") and "links" in none
