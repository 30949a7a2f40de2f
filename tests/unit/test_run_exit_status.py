"""`commbench run` exits 0 only when every Case is ok or skipped and something was measured."""
import textwrap

from click.testing import CliRunner

from commbench.cli import cli
from tests.conftest import needs_mpi

pytestmark = needs_mpi


def _run(tmp_path, benches: str):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndefaults: {ranks: 2, warmup: 1, iters: 2, sizes: [8B], timeout_s: 60}\n"
                     "benchmarks:\n" + textwrap.indent(textwrap.dedent(benches), "  "))
    return CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "run"), "--quiet"])


def test_all_ok_exits_0(tmp_path):
    result = _run(tmp_path, "- {name: a, family: harness, ops: [barrier]}\n")
    assert result.exit_code == 0, result.output
    assert "1 ok, 0 skipped, 0 wrong, 0 failed, 0 timeout -> exit 0" in result.output


def test_a_crashed_case_exits_1_and_says_the_counts(tmp_path):
    result = _run(tmp_path, """\
        - {name: a, family: harness, ops: [barrier]}
        - {name: b, family: harness, ops: [crash]}
        """)
    assert result.exit_code == 1, result.output
    assert "1 ok, 0 skipped, 0 wrong, 1 failed, 0 timeout" in result.output


def test_nothing_measured_exits_1(tmp_path, monkeypatch):
    # a node of one GPU (a stand-in at the NVML boundary) and 2 nccl ranks that may not share it:
    # the preflight settles the Case as skipped, so nothing is measured
    from commbench.sysinfo.nvml_devices import GpuSeen, GpusSeen

    one_gpu = GpusSeen((GpuSeen(0, "NVIDIA H100 80GB HBM3", 80 << 30, 79 << 30),), "stand-in")
    monkeypatch.setattr("commbench.sysinfo.nvml_devices.read_gpus", lambda env=None: one_gpu)
    result = _run(tmp_path, "- {name: a, family: collectives, backends: [nccl], ops: [all_reduce]}\n")
    assert result.exit_code == 1, result.output
    assert "nothing was measured" in result.output


def test_a_gpu_suite_without_a_gpu_exits_2_at_once(tmp_path, monkeypatch):
    from commbench.sysinfo.nvml_devices import GpusSeen

    monkeypatch.setattr("commbench.sysinfo.nvml_devices.read_gpus", lambda env=None: GpusSeen((), "none", "no NVML"))
    result = _run(tmp_path, "- {name: a, family: collectives, backends: [nccl], ops: [all_reduce]}\n")
    assert result.exit_code == 2 and "needs a GPU" in result.output, result.output
    assert not (tmp_path / "run").exists()   # refused before any run folder


def test_repeat_writes_one_run_folder_per_repeat_and_sums_the_counts(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndefaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B], timeout_s: 60}\n"
                     "benchmarks:\n  - {name: a, family: harness, ops: [barrier]}\n")
    out = tmp_path / "rep"
    runner = CliRunner()
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--repeat", "2"])
    assert res.exit_code == 0, res.output
    assert "2 ok, 0 skipped, 0 wrong, 0 failed, 0 timeout over 2 repeats -> exit 0" in res.output
    assert sorted(p.name for p in out.iterdir()) == ["repeat-1", "repeat-2"]
    # the folder is one side of a comparison, and may be resumed to add repeats
    assert runner.invoke(cli, ["compare", str(out), str(out / "repeat-1")]).exit_code == 0
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--repeat", "2"])
    assert res.exit_code == 2 and "already holds repeats" in res.output
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--repeat", "3", "--resume"])
    assert res.exit_code == 0 and (out / "repeat-3" / "results.csv").exists(), res.output
    assert runner.invoke(cli, ["report", str(out), "--out", str(tmp_path / "r.html")]).exit_code == 0
