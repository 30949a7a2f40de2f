"""benchmarks/parity_table.py on imported nccl-tests runs; the parity script's argument checks."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.import_nccl_tests import convert, import_files
from commbench.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "nccl_tests"
SCRIPT = ROOT / "benchmarks" / "parity_nccl_tests.sh"


def _table_module():
    spec = importlib.util.spec_from_file_location("parity_table", ROOT / "benchmarks" / "parity_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    files = [FX / "all_reduce_perf.txt", FX / "all_reduce_perf_G5.txt", FX / "sendrecv_perf.txt"]
    base = import_files(files, d / "base")[0]
    slow = import_files(files, d / "slow")[0]
    # the same points 10% slower for sendrecv only
    df = pd.read_csv(slow / "results.csv")
    df.loc[df["op"] == "sendrecv", "time_us"] *= 1.10
    df.to_csv(slow / "results.csv", index=False)
    return base, slow


def test_table_pairs_each_timing_mode_with_itself(runs, tmp_path):
    base, _ = runs
    out = tmp_path / "parity.md"
    assert _table_module().main([str(base), str(base), "--out", str(out), "--machine", "1x test"]) == 0
    md = out.read_text()
    assert "1x test" in md and "0 paired point(s) above it" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| all_reduce | False | 8B |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:9] == ["6.94", "6.94", "1.000", "1.35", "1.35", "1.000"]   # default loop | -G 5


def test_points_above_the_target_are_bold_and_fail(runs, tmp_path):
    base, slow = runs
    out = tmp_path / "parity.md"
    assert _table_module().main([str(base), str(slow), "--out", str(out)]) == 1
    md = out.read_text()
    assert "**1.100**" in md and "14 paired point(s) above it" in md   # 14 ok out-of-place sendrecv points
    assert "| all_reduce | False | 512MiB | 257.55 | 257.55 | 1.000 |" in md


def test_points_no_tool_timed_work_in_are_shown_but_not_held(runs, tmp_path):
    base, slow = runs
    tiny = tmp_path / "tiny"
    shutil.copytree(slow, tiny)
    df = pd.read_csv(tiny / "results.csv")
    df["time_us"] = 0.03   # timer resolution: no work timed
    floor = tmp_path / "floor"
    shutil.copytree(tiny, floor)
    df.to_csv(floor / "results.csv", index=False)
    df.loc[df["op"] == "sendrecv", "time_us"] = 0.045   # 1.5x, still under the floor
    df.to_csv(tiny / "results.csv", index=False)
    mod = _table_module()
    # both sides under the floor: shown, not held; with no floor the same points fail
    assert mod.main([str(floor), str(tiny), "--out", str(tmp_path / "a.md")]) == 0
    assert "(under 0.1 us)" in (tmp_path / "a.md").read_text()
    assert mod.main([str(floor), str(tiny), "--out", str(tmp_path / "b.md"), "--floor-us", "0"]) == 1
    # one side above the floor: held to the target as before
    assert mod.main([str(base), str(tiny), "--out", str(tmp_path / "c.md")]) == 0   # tiny is faster
    assert mod.main([str(tiny), str(base), "--out", str(tmp_path / "d.md")]) == 1


def test_parity_suite_matches_the_nccl_tests_sweep():
    cases = load_suite(ROOT / "suites" / "parity.yaml", gpu_count=8).cases
    sizes = sorted({c.size_bytes for c in cases})
    assert sizes == [8 * 4**k for k in range(14)]          # -b 8 -e 1G -f 4
    assert {c.timing for c in cases} == {"pipelined", "graph"}
    assert {(c.warmup, c.iters, c.ranks) for c in cases} == {(5, 20, 8)}
    assert len({c.op for c in cases}) == 7 and {c.param("in_place") for c in cases} == {False, True}


def test_imported_nccl_tests_points_have_the_parity_suites_case_ids(tmp_path):
    ours = {c.case_id: c for c in load_suite(ROOT / "suites" / "parity.yaml", gpu_count=1).cases}
    tables = [FX / f"{op}_perf{g}.txt" for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                   "broadcast", "reduce", "sendrecv") for g in ("", "_G5")]
    rows = convert(tables, bench="nccl")[0]
    theirs = {r["case_id"]: r for r in rows}
    assert len(theirs) == len(rows) == len(ours) == 392
    # nccl-tests' 16-byte rounding: at -b 8 its all_gather/reduce_scatter/alltoall rows are 0 B
    only_theirs = {(r["op"], r["size_bytes"]) for cid, r in theirs.items() if cid not in ours}
    only_ours = {(c.op, c.size_bytes) for cid, c in ours.items() if cid not in theirs}
    assert only_theirs == {(op, 0) for op in ("all_gather", "reduce_scatter", "alltoall")}
    assert only_ours == {(op, 8) for op in ("all_gather", "reduce_scatter", "alltoall")}
    assert len(set(ours) & set(theirs)) == 392 - 12


def test_parity_script_checks_its_arguments(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 2 and "usage" in res.stderr
    taken = tmp_path / "out"
    taken.mkdir()
    (taken / "x").write_text("")
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(b"")
    res = subprocess.run(["bash", str(SCRIPT), str(tarball), str(taken)], capture_output=True, text=True)
    assert res.returncode == 2 and "not empty" in res.stderr
    assert "export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in SCRIPT.read_text()


def test_a_rehearsal_run_is_refused(runs, tmp_path, capsys):
    """Rows measured with ranks sharing a GPU (ranks_per_gpu > 1) never enter a parity table."""
    base, _ = runs
    import shutil

    shared = tmp_path / "shared"
    shutil.copytree(base, shared)
    df = pd.read_csv(shared / "results.csv")
    df["ranks_per_gpu"] = 2
    df.to_csv(shared / "results.csv", index=False)
    out = tmp_path / "parity.md"
    assert _table_module().main([str(base), str(shared), "--out", str(out)]) == 2
    assert not out.exists()
    assert "shared one GPU" in capsys.readouterr().err
