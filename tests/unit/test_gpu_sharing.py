"""Ranks sharing a GPU: binding and NCCL host identities (measure/device.py), shared-GPU rows as a
rehearsal in compare, accept and report (analysis/rehearsal.py), the GPU session's row checks
(tests/gpu/check_rows.py), and the environment of ranks inside an MPI job (launch/inprocess.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.analysis import rehearsal
from commbench.analysis.accept.rules import load_rules
from commbench.analysis.accept.rule_check import evaluate_rule
from commbench.analysis.compare import compare_runs, failing_points
from commbench.analysis.report import markdown
from commbench.analysis.report.build import build_report
from commbench.cli import cli
from commbench.measure import device
from commbench.runfolder.reader import load_run
from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
HOSTID = device.HOSTID_VAR


# -- measure/device.py ------------------------------------------------------------------------

class FakeWorld:
    """One rank of a launch. ``replies``: for each allgather in turn, what every rank sends (this
    rank's own slot is replaced by what it really sends); without replies every rank sends the same."""

    def __init__(self, rank: int, size: int, local_rank: int | None = None, local_size: int | None = None,
                 hostname: str = "host", replies: list[list] | None = None):
        self.rank, self.size = rank, size
        self.local_rank = rank if local_rank is None else local_rank
        self.local_size = size if local_size is None else local_size
        self.hostname = hostname
        self.replies = list(replies or [])
        self.sent: list = []

    def allgather(self, obj):
        self.sent.append(obj)
        if self.replies:
            out = list(self.replies.pop(0))
            out[self.rank] = obj
            return out
        return [obj] * self.size


@pytest.fixture
def clean_hostid(monkeypatch):
    """No NCCL_HOSTID during the test and none after it (setenv first, so the absence is restored);
    a fresh record of the identities this process gave NCCL."""
    monkeypatch.setenv(HOSTID, "placeholder")
    monkeypatch.delenv(HOSTID)
    monkeypatch.setattr(device, "_SITE_HOSTID", {})
    return monkeypatch


@pytest.fixture
def gpus(monkeypatch):
    """torch (a CPU build) believes it sees N GPUs; returns a setter and the set_device calls."""
    import torch

    calls: list[int] = []

    def see(n: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", lambda idx: calls.append(idx))
        return calls
    return see


def test_ranks_on_my_gpu_counts_ranks_bound_modulo_gpus():
    assert device.ranks_on_my_gpu(0, 4, 1) == 4
    assert device.ranks_on_my_gpu(3, 4, 1) == 4
    assert device.ranks_on_my_gpu(1, 2, 2) == 1
    assert [device.ranks_on_my_gpu(r, 3, 2) for r in range(3)] == [2, 1, 2]
    assert [device.ranks_on_my_gpu(r, 8, 8) for r in range(8)] == [1] * 8


def test_shared_hostid_is_distinct_per_rank():
    ids = {device.shared_hostid("node7", r) for r in range(4)}
    assert ids == {"node7-r0", "node7-r1", "node7-r2", "node7-r3"}


def test_four_ranks_on_one_gpu_each_get_their_own_hostid(clean_hostid, gpus):
    calls = gpus(1)
    seen = []
    for rank in range(4):
        clean_hostid.delenv(HOSTID, raising=False)
        b = device.bind(FakeWorld(rank, 4, hostname="gpuhost"), needs_gpu=True)
        assert b.device == "cuda:0" and b.ranks_per_gpu == 4 and b.shared
        assert os.environ[HOSTID] == f"gpuhost-r{rank}" == b.nccl_hostid
        seen.append(os.environ[HOSTID])
    assert calls == [0, 0, 0, 0]
    assert len(set(seen)) == 4


def test_a_site_hostid_becomes_the_base(clean_hostid, gpus):
    gpus(1)
    clean_hostid.setenv(HOSTID, "site")
    b = device.bind(FakeWorld(2, 4), needs_gpu=True)
    assert b.nccl_hostid == "site-r2" and os.environ[HOSTID] == "site-r2"


@pytest.mark.parametrize("site", [None, "site"])
def test_binding_twice_in_one_process_keeps_one_suffix(clean_hostid, gpus, site):
    gpus(1)
    if site:
        clean_hostid.setenv(HOSTID, site)
    first = device.bind(FakeWorld(1, 2, hostname="host"), needs_gpu=True)
    second = device.bind(FakeWorld(1, 2, hostname="host"), needs_gpu=True)
    want = f"{site or 'host'}-r1"
    assert first.nccl_hostid == second.nccl_hostid == want
    assert os.environ[HOSTID] == want


def test_one_rank_per_gpu_leaves_nccl_hostid_alone(clean_hostid, gpus):
    calls = gpus(2)
    for rank in range(2):
        b = device.bind(FakeWorld(rank, 2), needs_gpu=True)
        assert b.device == f"cuda:{rank}" and b.ranks_per_gpu == 1 and not b.shared
        assert b.nccl_hostid is None
        assert HOSTID not in os.environ
    assert calls == [0, 1]


def test_every_rank_learns_the_most_ranks_any_gpu_carries(clean_hostid, gpus):
    """3 ranks on 2 GPUs: rank 1 is alone on GPU 1, but GPU 0 carries two ranks, so the launch
    shares and rank 1 needs its own identity too (NCCL sees every rank of the host)."""
    gpus(2)
    world = FakeWorld(1, 3, replies=[[2, None, 2]])
    b = device.bind(world, needs_gpu=True)
    assert world.sent == [1]   # what rank 1 told the others: its own GPU's count
    assert b.device == "cuda:1" and b.ranks_per_gpu == 2
    assert os.environ[HOSTID] == "host-r1"


def test_no_gpu_needed_binds_the_cpu(clean_hostid, gpus):
    calls = gpus(1)
    b = device.bind(FakeWorld(0, 4), needs_gpu=False)
    assert b == device.Binding(device="cpu", ranks_per_gpu=None, nccl_hostid=None)
    assert not b.shared and calls == [] and HOSTID not in os.environ


def test_no_cuda_binds_the_cpu(clean_hostid, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    b = device.bind(FakeWorld(0, 4), needs_gpu=True)
    assert b.device == "cpu" and b.ranks_per_gpu is None and HOSTID not in os.environ


def test_sharing_record_lists_devices_and_identities():
    world = FakeWorld(0, 3, replies=[[None, "h-r1", "h-r2"], [None, "cuda:0", "cuda:0"]])
    rec = device.sharing_record(world, device.Binding("cuda:0", 3, "h-r0"))
    assert rec == {"ranks_per_gpu": 3, "devices": {"0": "cuda:0", "1": "cuda:0", "2": "cuda:0"},
                   "nccl_hostid": {"0": "h-r0", "1": "h-r1", "2": "h-r2"}}
    # unshared: no identities recorded
    rec = device.sharing_record(FakeWorld(0, 2, replies=[[None, None], [None, "cuda:1"]]),
                                device.Binding("cuda:0", 1, None))
    assert rec["nccl_hostid"] == {} and rec["devices"] == {"0": "cuda:0", "1": "cuda:1"}


def test_nccl_identity_clash(clean_hostid):
    # two ranks on GPU 0 of one host with one identity (none at all): NCCL would refuse them
    world = FakeWorld(0, 2, hostname="h", replies=[[None, ("h", "cuda:0", None)]])
    why = device.nccl_identity_clash(world, "cuda:0")
    assert why is not None and HOSTID in why and "Duplicate GPU" in why
    # a site identity set after bind, the same on both ranks: a clash too
    clean_hostid.setenv(HOSTID, "site")
    world = FakeWorld(1, 2, hostname="h", replies=[[("h", "cuda:0", "site"), None]])
    assert device.nccl_identity_clash(world, "cuda:0") is not None
    # each rank its own identity (what bind gives): no clash
    clean_hostid.setenv(HOSTID, "h-r1")
    world = FakeWorld(1, 2, hostname="h", replies=[[("h", "cuda:0", "h-r0"), None]])
    assert device.nccl_identity_clash(world, "cuda:0") is None
    # different GPUs, or different hosts, with one identity: no clash
    clean_hostid.delenv(HOSTID)
    assert device.nccl_identity_clash(FakeWorld(0, 2, hostname="h", replies=[[None, ("h", "cuda:1", None)]]),
                                      "cuda:0") is None
    assert device.nccl_identity_clash(FakeWorld(0, 2, hostname="a", replies=[[None, ("b", "cuda:0", None)]]),
                                      "cuda:0") is None


def test_identities_from_bind_never_clash(clean_hostid, gpus):
    gpus(1)
    places = []
    for rank in range(4):
        clean_hostid.delenv(HOSTID, raising=False)
        b = device.bind(FakeWorld(rank, 4, hostname="h"), needs_gpu=True)
        places.append(("h", b.device, os.environ[HOSTID]))
    assert device.nccl_identity_clash(FakeWorld(3, 4, hostname="h", replies=[places]), "cuda:0") is None


# -- analysis/rehearsal.py in compare, accept and report --------------------------------------

def _copy_with_ranks_per_gpu(dst: Path, value, ops=None, src: Path = RUNS / "cpu-base") -> Path:
    """A copy of a fixture run whose rows (those of ``ops``, else all) say ranks_per_gpu=value."""
    shutil.copytree(src, dst)
    csv = dst / "results.csv"
    df = pd.read_csv(csv, keep_default_na=False)
    df["ranks_per_gpu"] = ""
    mask = df["op"].isin(ops) if ops else pd.Series(True, index=df.index)
    df["ranks_per_gpu"] = df["ranks_per_gpu"].astype(object)
    df.loc[mask, "ranks_per_gpu"] = value
    df.to_csv(csv, index=False)
    return dst


def test_rehearsal_helpers():
    df = pd.DataFrame({"ranks_per_gpu": [4, 1, float("nan"), "", None, 2]})
    assert rehearsal.shared_mask(df).tolist() == [True, False, False, False, False, True]
    assert not rehearsal.shared_mask(pd.DataFrame({"op": ["x"]})).any()
    assert [rehearsal.ranks_per_gpu(v) for v in (4, "3", None, "", float("nan"), float("inf"))] == [4, 3, 0, 0, 0, 0]
    assert "shared one GPU" in rehearsal.shared_reason(4)
    assert rehearsal.is_speed_metric("time_us") and rehearsal.is_speed_metric("busbw_gbps")
    assert rehearsal.is_speed_metric("tokens_per_s")
    assert not rehearsal.is_speed_metric("wrong") and not rehearsal.is_speed_metric("size_bytes")


def test_compare_calls_shared_rows_not_comparable(tmp_path):
    base, shared = load_run(RUNS / "cpu-base"), load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4))
    pts = compare_runs(base, shared)
    assert len(pts) == len(base.results)
    assert set(pts["verdict"]) == {"not comparable"}
    assert pts["why"].str.contains("shared one GPU").all()
    assert pts["why"].str.startswith("new:").all()
    assert len(failing_points(pts, 5.0)) == len(pts)
    back = compare_runs(shared, base)
    assert set(back["verdict"]) == {"not comparable"} and back["why"].str.startswith("base:").all()


def test_compare_without_sharing_behaves_as_before(tmp_path):
    base = load_run(RUNS / "cpu-base")
    plain = compare_runs(base, base)
    assert set(plain["verdict"]) == {"unchanged"}
    one = load_run(_copy_with_ranks_per_gpu(tmp_path / "one", 1))   # one rank per GPU: real speed
    pts = compare_runs(base, one)
    assert set(pts["verdict"]) == {"unchanged"}
    assert not pts["why"].str.contains("shared").any()


def test_compare_judges_shared_rows_only(tmp_path):
    base = load_run(RUNS / "cpu-base")
    part = load_run(_copy_with_ranks_per_gpu(tmp_path / "part", 4, ops=["all_reduce"]))
    pts = compare_runs(base, part)
    ar = pts[pts["op"] == "all_reduce"]
    rest = pts[pts["op"] != "all_reduce"]
    assert len(ar) and set(ar["verdict"]) == {"not comparable"}
    assert ar["why"].str.contains("4 ranks shared one GPU").all()
    assert len(rest) and set(rest["verdict"]) == {"unchanged"}


def test_cli_compare_fails_on_shared_rows(tmp_path):
    shared = _copy_with_ranks_per_gpu(tmp_path / "shared", 4)
    runner = CliRunner()
    res = runner.invoke(cli, ["compare", str(RUNS / "cpu-base"), str(shared), "--fail-above", "5",
                              "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 1, res.output
    assert "shared one GPU" in res.stdout   # the failing points' why
    assert "shared one GPU" in (tmp_path / "c.md").read_text()
    one = _copy_with_ranks_per_gpu(tmp_path / "one", 1)
    ok = runner.invoke(cli, ["compare", str(RUNS / "cpu-base"), str(one), "--fail-above", "5"])
    assert ok.exit_code == 0, ok.output
    assert "shared one GPU" not in ok.output


def test_plain_cli_compare_says_why_shared_rows_are_not_comparable(tmp_path):
    shared = _copy_with_ranks_per_gpu(tmp_path / "shared", 4)
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(shared)])
    assert res.exit_code == 0, res.output
    assert "shared one GPU" in res.output


def _rule(tmp_path, metric, op, value, select="{backend: mpi}", aggregate="min"):
    p = tmp_path / f"rules-{metric}.yaml"
    p.write_text(textwrap.dedent(f"""\
        rules:
          - name: r
            select: {select}
            metric: {metric}
            aggregate: {aggregate}
            op: "{op}"
            value: {value}
        """))
    return load_rules(p).rules[0]


@pytest.mark.parametrize("metric,op,value", [("busbw_gbps", ">=", 0), ("time_us", "<=", 1e9),
                                             ("algbw_gbps", ">=", 0)])
def test_accept_refuses_speed_rules_on_shared_rows(tmp_path, metric, op, value):
    rule = _rule(tmp_path, metric, op, value)
    base = load_run(RUNS / "cpu-base")
    assert evaluate_rule(rule, base, None).passed   # the same rule passes one rank per GPU
    shared = load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4))
    v = evaluate_rule(rule, shared, None)
    assert not v.passed
    assert "shared one GPU" in v.reason


def test_accept_still_judges_wrong_on_shared_rows(tmp_path):
    shared = load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4))
    v = evaluate_rule(_rule(tmp_path, "wrong", "<=", 0, aggregate="max"), shared, None)
    assert v.passed, v.reason
    assert "shared" not in v.reason
    # and a wrong result on a shared row still fails it
    shared.results.loc[shared.results.index[0], "wrong"] = 3
    v = evaluate_rule(_rule(tmp_path, "wrong", "<=", 0, select="{backend: [mpi, gloo]}", aggregate="max"),
                      shared, None)
    assert not v.passed and "shared" not in v.reason


@pytest.mark.parametrize("metric", ["time_us_p90", "time_us_max", "time_us_min"])
def test_accept_refuses_tail_time_rules_on_shared_rows(tmp_path, metric):
    shared = load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4))
    v = evaluate_rule(_rule(tmp_path, metric, "<=", 1e9), shared, None)
    assert not v.passed and "shared one GPU" in v.reason


def test_accept_refuses_a_shared_baseline_for_within_pct_of(tmp_path):
    p = tmp_path / "pct.yaml"
    p.write_text(textwrap.dedent("""\
        rules:
          - name: close
            select: {backend: mpi}
            metric: time_us
            aggregate: median
            op: within_pct_of
            pct: 5
        """))
    rule = load_rules(p).rules[0]
    base = load_run(RUNS / "cpu-base")
    shared = load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4))
    v = evaluate_rule(rule, base, shared)
    assert not v.passed and "shared one GPU" in v.reason


def _text(doc) -> str:
    return markdown.render(doc)


def test_report_names_a_rehearsal(tmp_path):
    shared = load_run(_copy_with_ranks_per_gpu(tmp_path / "shared", 4, ops=["all_reduce"]))
    text = _text(build_report([shared]))
    assert "Correctness rehearsal" in text
    n = int((shared.results["op"] == "all_reduce").sum())
    assert f"{n} of {len(shared.results)} points ran with up to 4 ranks on one GPU" in text
    assert "Ranks shared a GPU" in text   # the Warnings subsection


def test_report_without_sharing_has_no_rehearsal_note(tmp_path):
    text = _text(build_report([load_run(RUNS / "cpu-base")]))
    assert "Correctness rehearsal" not in text and "Ranks shared a GPU" not in text
    one = load_run(_copy_with_ranks_per_gpu(tmp_path / "one", 1))
    assert "Correctness rehearsal" not in _text(build_report([one]))


# -- tests/gpu/check_rows.py -------------------------------------------------------------------

def _check_rows():
    spec = importlib.util.spec_from_file_location("gpu_check_rows", ROOT / "tests" / "gpu" / "check_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cr = _check_rows()


def _row(**kw) -> dict:
    row = {"bench": "x", "op": "all_reduce", "backend": "nccl", "size_bytes": 1024, "world_size": 2,
           "status": "ok", "reason": "", "ranks_per_gpu": ""}
    row.update(kw)
    return row


def _check(rows, run_rc=0, expect=(), no_skip=(), shared=False, min_rows=1, require=()):
    return cr.check(rows, run_rc, [(cr._selector(s), st) for s, st in expect], [cr._selector(s) for s in no_skip],
                    shared, min_rows, tuple(require))


def test_check_rows_expected_wrong_row_passes():
    rows = [_row(status="wrong", reason="2 elements differ"), _row(bench="y")]
    assert _check(rows, run_rc=1, expect=[("bench=x", "wrong")]) == []
    # the same row without the expectation is a problem
    probs = _check(rows, run_rc=1)
    assert len(probs) == 1 and "wrong" in probs[0] and "expected ok or skipped" in probs[0]


def test_check_rows_an_expected_status_that_did_not_happen_is_a_problem():
    probs = _check([_row(status="ok")], run_rc=0, expect=[("bench=x", "wrong")])
    assert len(probs) == 1 and "ok ()" in probs[0] and "expected wrong" in probs[0]


def test_check_rows_unexpected_failed_row_is_a_problem():
    probs = _check([_row(status="failed", reason="boom"), _row(bench="y")], run_rc=1)
    assert len(probs) == 1 and "failed (boom)" in probs[0]


def test_check_rows_skip_under_no_skip_is_a_problem():
    rows = [_row(status="skipped", reason="no NCCL")]
    assert _check(rows) == []   # skipped is accepted by default
    probs = _check(rows, no_skip=["backend=nccl*"])
    assert len(probs) == 1 and "skipped (no NCCL)" in probs[0] and "expected ok" in probs[0]
    assert _check([_row(status="skipped", backend="gloo")], no_skip=["backend=nccl*"]) == []


def test_check_rows_shared_needs_ranks_per_gpu_on_ok_gpu_rows():
    assert _check([_row(ranks_per_gpu=4)], shared=True) == []
    probs = _check([_row(ranks_per_gpu="")], shared=True)
    assert len(probs) == 1 and "ranks_per_gpu" in probs[0]
    assert len(_check([_row(ranks_per_gpu=1)], shared=True)) == 1
    assert _check([_row(ranks_per_gpu="")], shared=False) == []
    # CPU backends, one-rank rows and rows not ok carry no claim
    assert _check([_row(backend="gloo"), _row(backend="mpi")], shared=True) == []
    assert _check([_row(world_size=1)], shared=True) == []
    assert _check([_row(status="skipped")], shared=True) == []


def test_check_rows_run_rc_must_match_the_rows():
    wrong = [_row(status="wrong")]
    probs = _check(wrong, run_rc=0, expect=[("bench=x", "wrong")])
    assert probs == ["commbench run exited 0; its rows imply 1"]
    assert _check([_row()], run_rc=1) == ["commbench run exited 1; its rows imply 0"]
    assert "its rows imply 1" in " ".join(_check([], run_rc=0, min_rows=0))


def test_check_rows_min_rows():
    assert any("expected at least 3" in p for p in _check([_row()], min_rows=3))


def test_requirement_equal_value():
    rows = [_row(late_rank=1), _row(late_rank=1, op="all_gather"), _row(bench="y", late_rank=0)]
    assert cr.requirement_problems(rows, "bench=x:late_rank==1") == []
    rows.append(_row(late_rank=0, op="broadcast"))
    probs = cr.requirement_problems(rows, "bench=x:late_rank==1")
    assert len(probs) == 1 and "1 of 3 rows miss it" in probs[0] and "broadcast" in probs[0]
    # rows not ok are not judged; no ok row at all is a problem of its own
    assert cr.requirement_problems([_row(late_rank=0, status="skipped"), _row(late_rank=1)],
                                   "bench=x:late_rank==1") == []
    assert "no ok row matches" in cr.requirement_problems([_row(bench="y")], "bench=x:late_rank==1")[0]


def test_requirement_above_zero():
    assert cr.requirement_problems([_row(kernel_us=3.5), _row(kernel_us="0.1")], "bench=x:kernel_us>0") == []
    for bad in (0, "", None, "n/a", -1):
        probs = cr.requirement_problems([_row(kernel_us=2.0), _row(kernel_us=bad)], "bench=x:kernel_us>0")
        assert len(probs) == 1 and "1 of 2 rows miss it" in probs[0], bad
    assert cr.requirement_problems([_row()], "bench=x:kernel_us>0")   # a missing column misses it too
    # through check(): a requirement's problem is a problem of the step
    assert _check([_row(kernel_us=0)], require=["bench=x:kernel_us>0"])


# -- launch/inprocess.py: ranks inside an MPI job keep the parent's environment ---------------

SPY = """\
import json, os, sys
import commbench.launch.inprocess as inprocess

real = inprocess.run_cases
seen = sys.argv[1]


def spy(cases, world, *args, **kwargs):
    keys = ("PATH", "COMMBENCH_JIT_CACHE", "COMMBENCH_RUN_DIR")
    with open(os.path.join(seen, f"env-{world.rank}.json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in keys}, f)
    return real(cases, world, *args, **kwargs)


inprocess.run_cases = spy
from commbench.cli import main
sys.argv = ["commbench", *sys.argv[2:]]
main()
"""


@needs_mpi
def test_ranks_inside_an_mpi_job_keep_the_parents_environment(tmp_path):
    from commbench.launch.mpiexec import find_mpiexec

    suite = tmp_path / "tiny.yaml"
    suite.write_text(textwrap.dedent("""\
        name: tiny
        defaults: {ranks: 2, warmup: 1, iters: 2, sizes: [1KiB], timeout_s: 60}
        benchmarks:
          - {name: ar, family: collectives, backends: [mpi], ops: [all_reduce]}
        """))
    spy = tmp_path / "spy.py"
    spy.write_text(SPY)
    seen = tmp_path / "seen"
    seen.mkdir()
    out = tmp_path / "run"
    jit = str(tmp_path / "jit-cache")
    env = {**os.environ, "COMMBENCH_JIT_CACHE": jit, "PYTHONPATH": str(ROOT)}
    argv = [find_mpiexec(), "-n", "2", "--oversubscribe", "--allow-run-as-root", "-x", "COMMBENCH_JIT_CACHE",
            "-x", "PYTHONPATH", sys.executable, str(spy), str(seen), "run", str(suite), "--out", str(out), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        rank_env = json.loads((seen / f"env-{rank}.json").read_text())
        assert rank_env["COMMBENCH_JIT_CACHE"] == jit, rank_env   # lost when built after a clear
        assert set(env["PATH"].split(os.pathsep)) <= set((rank_env["PATH"] or "").split(os.pathsep)), rank_env
        assert rank_env["COMMBENCH_RUN_DIR"] == str(out)   # and the launch's own variables over it
    meta = json.loads((out / "run.json").read_text())
    assert meta["env"].get("COMMBENCH_JIT_CACHE") == jit
    assert meta["gpu_binding"]["inprocess-0"]["devices"] == {"0": "cpu", "1": "cpu"}
    df = load_run(out).results
    assert len(df) == 1 and (df["status"] == "ok").all() and (df["world_size"] == 2).all()
