"""Per-node and pairwise placement: expansion, launcher argv, and naming the bad node from pair runs."""
import textwrap
from pathlib import Path

import pandas as pd

from commbench.launch import mpiexec as launch
from commbench.analysis.accept.node_check import placement_verdicts
from commbench.analysis.accept.rules import load_rules
from commbench.runfolder.reader import Run
from commbench.suite import load_suite
from tests.conftest import needs_mpi

SUITE = """\
name: pl
defaults: {ranks: 8, sizes: [1MiB]}
benchmarks:
  - {name: node, family: collectives, ops: [all_reduce], backends: [nccl], placement: per_node}
  - {name: pair, family: collectives, ops: [sendrecv], backends: [nccl], placement: pairs}
"""


def test_expansion_one_launch_per_node_and_per_pair(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_HOSTS", "a,b,c,d")
    p = tmp_path / "pl.yaml"
    p.write_text(SUITE)
    s = load_suite(p, gpu_count=8)
    node = [l for l in s.launches if len(l.hosts) == 1]
    pair = [l for l in s.launches if len(l.hosts) == 2]
    assert [l.hosts for l in node] == [("a",), ("b",), ("c",), ("d",)]
    assert all(l.ranks == 8 and l.ranks_per_node == 8 for l in node)
    assert sorted(l.hosts for l in pair) == [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    assert all(l.ranks == 16 and l.ranks_per_node == 8 for l in pair)


def test_pairs_need_two_hosts(tmp_path, monkeypatch):
    import pytest

    from commbench.errors import SuiteError

    monkeypatch.setenv("COMMBENCH_HOSTS", "solo")
    p = tmp_path / "pl.yaml"
    p.write_text(SUITE)
    with pytest.raises(SuiteError, match="pairs needs at least 2 hosts"):
        load_suite(p, gpu_count=8)


def test_open_mpi_and_srun_place_on_named_hosts(monkeypatch):
    monkeypatch.setattr(launch, "find_mpiexec", lambda: "/x/mpiexec")
    monkeypatch.setattr(launch, "_is_open_mpi", lambda _m: True)
    monkeypatch.setattr(launch, "inside_slurm_allocation", lambda: False)
    argv = launch.launcher_argv(16, 8, [], ("n1", "n2"))
    assert argv[argv.index("--host") + 1] == "n1:8,n2:8"
    monkeypatch.setattr(launch, "inside_slurm_allocation", lambda: True)
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/usr/bin/srun")
    from commbench.launch import srun

    monkeypatch.setattr(srun, "choose_mpi_plugin", lambda: ("pmi2", "test"))   # no probe here
    argv = launch.launcher_argv(16, 8, [], ("n1", "n2"))
    assert "--nodelist=n1,n2" in argv and "--nodes=2" in argv


def _pair_run(bad: str) -> Run:
    rows = []
    for a, b in [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]:
        slow = bad in (a, b)
        rows.append({"op": "sendrecv", "backend": "nccl", "variant": "default", "dtype": "float32",
                     "size_bytes": 1 << 30, "busbw_gbps": 20.0 if slow else 45.0, "time_us": 1.0,
                     "wrong": 0, "status": "ok", "hosts": f"{a},{b}", "case_id": f"{a}{b}"})
    return Run(path=Path("/tmp/none"), results=pd.DataFrame(rows), samples=pd.DataFrame())


def test_pair_rounds_name_the_bad_node(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(textwrap.dedent("""\
        rules:
          - {name: p2p floor, select: {op: sendrecv}, metric: busbw_gbps, aggregate: min, op: ">=", value: 40}
          - {name: unrelated, select: {op: all_reduce}, metric: busbw_gbps, aggregate: min, op: ">=", value: 1}
        """))
    ruleset = load_rules(rules)
    verdicts = placement_verdicts(_pair_run("c"), ruleset)
    assert [v.check for v in verdicts] == ["bad node c"]
    assert placement_verdicts(_pair_run("none"), ruleset) == []


@needs_mpi
def test_per_node_run_on_this_host_records_the_host(tmp_path, monkeypatch):
    import socket

    from click.testing import CliRunner

    from commbench.cli import cli
    from commbench.runfolder.reader import load
    monkeypatch.setenv("COMMBENCH_HOSTS", socket.gethostname())
    suite = tmp_path / "pn.yaml"
    suite.write_text(textwrap.dedent("""\
        name: pn
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [1KiB]}
        benchmarks:
          - {name: node, family: collectives, ops: [all_reduce], backends: [mpi], placement: per_node}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    df = load(out)
    assert list(df.status) == ["ok"] and list(df.host) == [socket.gethostname()]
