"""End-to-end CPU runs with 2 ranks under mpiexec: mpi and gloo backends, results, resume, failures."""
import json
import textwrap

import pytest
from click.testing import CliRunner

from commbench import metrics
from commbench.cli import cli
from commbench.runfolder.reader import load, load_run, load_samples
from tests.conftest import needs_mpi

pytestmark = needs_mpi

SUITE = """\
name: e2e
defaults: {ranks: 2, warmup: 1, iters: 4, timeout_s: 60, sizes: [64B, 4KiB, 96KiB]}
benchmarks:
  - name: mpi
    family: collectives
    backends: [mpi]
    ops: [all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather, scatter]
    dtypes: [float32, int32]
    params: {in_place: [false, true], reduce_op: [sum, max]}
  - name: gloo
    family: collectives
    backends: [gloo]
    ops: [all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather, scatter]
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    suite = tmp / "e2e.yaml"
    suite.write_text(SUITE)
    out = tmp / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def test_every_supported_case_is_ok_and_correct(run_dir):
    df = load(run_dir)
    ok = df[df.status == "ok"]
    skipped = df[df.status == "skipped"]
    # only the ops without an in-place form are skipped, each with its reason
    assert set(skipped.op) <= {"alltoall", "sendrecv"}
    assert skipped.reason.str.contains("no in-place form").all()
    assert (df.status.isin(["ok", "skipped"])).all(), df[~df.status.isin(["ok", "skipped"])][["op", "reason"]]
    assert (ok.wrong == 0).all()
    for backend in ("mpi", "gloo"):
        assert set(ok[ok.backend == backend].op) == set(metrics.COLLECTIVE_OPS) - {"alltoallv"}   # nccl only


def test_busbw_matches_formula(run_dir):
    df = load(run_dir)
    ok = df[df.status == "ok"]
    for _, r in ok.iterrows():
        elem = metrics.DTYPE_BYTES[r["dtype"]]
        expect = metrics.busbw_gbps(r.op, int(r.size_bytes), elem, int(r.world_size), float(r.time_us))
        assert r.busbw_gbps == pytest.approx(expect, rel=1e-9)
        assert r.time_us_min <= r.time_us <= r.time_us_p90 <= r.time_us_max


def test_gather_scatter_rows_follow_nccl_tests(run_dir):
    """nccl-tests' gather/scatter: size is the root's whole buffer (count per rank = size/ts/2),
    algbw = size / time, busbw = algbw * (n-1)/n; in place and out of place, MPI and gloo."""
    df = load(run_dir)
    rows = df[df.op.isin(["gather", "scatter"])]
    assert set(zip(rows.backend, rows.op)) == {(b, o) for b in ("mpi", "gloo") for o in ("gather", "scatter")}
    assert (rows.status == "ok").all() and (rows.wrong == 0).all()
    assert set(rows[rows.backend == "mpi"].in_place.astype(bool)) == {False, True}
    for _, r in rows.iterrows():
        elem = metrics.DTYPE_BYTES[r["dtype"]]
        assert r["count"] == int(r.size_bytes) // elem // 2
        algbw = r.size_bytes / (r.time_us * 1e-6) / 1e9
        assert r.algbw_gbps == pytest.approx(algbw, rel=1e-9)
        assert r.busbw_gbps == pytest.approx(algbw * (2 - 1) / 2, rel=1e-9)


def test_samples_per_rank_and_iteration(run_dir):
    df = load(run_dir)
    s = load_samples(run_dir)
    ok = df[df.status == "ok"]
    assert set(s.case_id) == set(ok.case_id)
    per_case = s.groupby("case_id").size()
    assert (per_case == 2 * 4).all()  # 2 ranks x 4 iterations
    # the row's median is the median over iterations of the slowest rank
    cid = ok.case_id.iloc[0]
    slowest = s[s.case_id == cid].groupby("iteration").time_us.max()
    assert ok.set_index("case_id").loc[cid, "time_us"] == pytest.approx(slowest.median())


def test_run_json_metadata_is_filtered(run_dir):
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["schema_version"] == 1
    assert meta["suite"] == "e2e"
    # the family's parameter columns, so a report tells parameters from measurements without families
    assert meta["param_columns"] == {"collectives": ["in_place", "reduce_op", "timed_loop", "buffer_span_bytes",
                                                     "register", "offset_bytes", "traffic", "rank_time"]}
    assert {"reduce_op", "timed_loop"} <= set(load(run_dir).columns)
    assert all(k.split("_")[0] + "_" in ("NCCL_", "NVSHMEM_", "CUDA_", "UCX_", "OMPI_", "TORCH_", "COMMBENCH_")
               for k in meta["env"])
    assert "PATH" not in meta["env"]
    assert meta["launches"][0]["status"] == "ok"
    assert (run_dir / "suite.yaml").exists() and (run_dir / "plan.json").exists()


def test_results_csv_has_no_bound_columns_to_leave_empty(run_dir):
    """Bounds are computed when a run is read (report, accept, compare: analysis/bounds.py), so
    the written header has none of their columns, and reading adds them from run.json."""
    from commbench.analysis.bound_limits import BOUND_COLUMNS
    from commbench.analysis.bounds import with_bounds

    header = (run_dir / "results.csv").read_text().splitlines()[0].split(",")
    assert not set(BOUND_COLUMNS) & set(header)
    run = load_run(run_dir)
    read = with_bounds(run.results, run.meta)
    assert read["bound_reason"].astype(bool).all()   # a CPU run: no bound, and each row says why


def test_plots_written(run_dir):
    pngs = list((run_dir / "plots").glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)


def test_existing_folder_is_not_overwritten(run_dir, tmp_path):
    suite = tmp_path / "e2e.yaml"
    suite.write_text(SUITE)
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(run_dir)])
    assert result.exit_code == 2
    assert "--resume" in result.output


def test_resume_skips_finished_cases(run_dir, tmp_path):
    suite = tmp_path / "e2e.yaml"
    suite.write_text(SUITE)
    before = len(load(run_dir))
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(run_dir), "--resume", "--quiet"])
    assert result.exit_code == 0, result.output
    assert len(load(run_dir)) == before


def test_hang_and_crash_become_rows_and_the_run_goes_on(tmp_path):
    suite = tmp_path / "faults.yaml"
    suite.write_text(textwrap.dedent("""\
        name: faults
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
        benchmarks:
          - {name: before, family: harness, ops: [barrier]}
          - {name: hang, family: harness, ops: [hang], timeout_s: 3}
          - {name: crash, family: harness, ops: [crash]}
          - {name: after, family: harness, ops: [barrier]}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 1, result.output  # a timeout and a failure fail the run
    df = load(out).set_index("bench")
    assert df.loc["before", "status"] == "ok"
    assert df.loc["hang", "status"] == "timeout"
    assert "logs/launch-0.log" in df.loc["hang", "reason"]
    # the hung rank's Python stack was captured before the kill
    stacks = (out / "logs" / "launch-0.rank1.stacks.txt").read_text()
    assert "harness/family.py" in stacks and "in run" in stacks
    assert df.loc["crash", "status"] == "failed"
    assert df.loc["after", "status"] == "ok"  # relaunched after the failures
    assert df.loc["after", "time_us"] > 0


def test_sigterm_kills_the_ranks_and_keeps_rows(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    suite = tmp_path / "slow.yaml"
    suite.write_text(textwrap.dedent("""\
        name: slow
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
        benchmarks:
          - {name: first, family: harness, ops: [barrier]}
          - {name: hang, family: harness, ops: [hang], timeout_s: 300}
        """))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"])
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "results.jsonl").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    left = subprocess.run(["pgrep", "-f", f"commbench.rank {out}"], capture_output=True, text=True).stdout
    assert left.strip() == ""
    assert load(out).set_index("bench").loc["first", "status"] == "ok"


def test_inside_an_mpi_job_each_process_is_a_rank(tmp_path):
    import subprocess
    import sys

    from commbench.launch.mpiexec import find_mpiexec

    suite = tmp_path / "inside.yaml"
    suite.write_text(textwrap.dedent("""\
        name: inside
        defaults: {warmup: 1, iters: 3, sizes: [1KiB]}
        benchmarks:
          - {name: two, family: collectives, backends: [mpi], ops: [all_reduce, alltoall], ranks: 2}
          - {name: four, family: collectives, backends: [mpi], ops: [all_reduce], ranks: 4}
          - {name: variant, family: collectives, backends: [mpi], ops: [all_reduce], ranks: 2,
             env: {NCCL_ALGO: Ring}}
        """))
    out = tmp_path / "run"
    argv = [find_mpiexec(), "-n", "2", "--oversubscribe", "--allow-run-as-root",
            sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = load(out).set_index("bench")
    assert (df.loc["two", "status"] == "ok").all() and (df.loc["two", "world_size"] == 2).all()
    assert df.loc["four", "status"] == "skipped"
    assert "needs 4 ranks" in df.loc["four", "reason"]
    # a second environment cannot be honoured in the same processes
    assert df.loc["variant", "status"] == "skipped"
    assert "fresh processes" in df.loc["variant", "reason"]
    # an error on rank 0 (existing folder) reaches every rank: exit 2, no hang
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "--resume" in again.stderr


def test_a_rerun_row_supersedes_the_timed_out_one(tmp_path):
    suite = tmp_path / "r.yaml"
    text = textwrap.dedent("""\
        name: r
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
        benchmarks:
          - {name: flaky, family: harness, ops: [OP], timeout_s: 3}
        """)
    suite.write_text(text.replace("OP", "hang"))
    out = tmp_path / "run"
    # the timeout fails the run
    assert CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"]).exit_code == 1
    assert list(load(out).status) == ["timeout"]
    # what --resume does after rerunning that Case: append its new row
    from commbench.runfolder import RunFolder

    folder = RunFolder(out)
    row = dict(folder.rows()[0], status="ok", reason="", time_us=1.0, wrong=0)   # as a measured rerun
    folder.append_row(row)
    df = load(out)
    assert len(df) == 1 and df.status.iloc[0] == "ok"
    assert row["case_id"] in folder.done_case_ids()


def test_only_runs_a_subset_then_resume_adds_another(tmp_path):
    suite = tmp_path / "two.yaml"
    suite.write_text(textwrap.dedent("""\
        name: two
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
        benchmarks:
          - {name: first, family: harness, ops: [barrier]}
          - {name: second, family: harness, ops: [barrier], env: {COMMBENCH_GROUP: other}}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--only", "second"])
    assert result.exit_code == 0, result.output
    assert set(load(out).bench) == {"second"}
    plan = json.loads((out / "plan.json").read_text())
    assert [l["launch_id"] for l in plan["launches"]] == [1]      # the whole suite's launch id
    assert (out / "logs" / "launch-1.log").exists() and not (out / "logs" / "launch-0.log").exists()
    # another --only mixes settings: refused unless --force (tests/unit/test_resume_guard.py)
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--resume",
                                      "--only", "first", "--force"])
    assert result.exit_code == 0, result.output
    assert set(load(out).bench) == {"first", "second"}
    plan = json.loads((out / "plan.json").read_text())
    assert [l["launch_id"] for l in plan["launches"]] == [0, 1] and len(plan["cases"]) == 2
    meta = json.loads((out / "run.json").read_text())
    assert meta["overrides"] == {"only": ["first"]}
    assert meta["earlier_overrides"] == [{"only": ["second"]}]
