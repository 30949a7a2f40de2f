"""NCCL TUNING log parser, on saved logs (constructed from NCCL's format strings, and real ones)."""
from pathlib import Path

import pytest

from commbench.sysinfo import nccl_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_logs"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_modern_format_names_and_channels():
    choices = nccl_log.parse_tuning(_read("constructed-2.28-8gpu-auto.log"))
    assert len(choices) == 8  # the opCount line and the tuning table are not choices
    first = choices[0]
    assert (first.func, first.size_bytes, first.algo, first.proto, first.channels) == ("AllReduce", 8, "Ring", "LL", 1)
    big = [c for c in choices if c.size_bytes == 268435456][0]
    assert (big.algo, big.proto, big.channels) == ("NVLS", "Simple", 16)
    with_comm = [c for c in choices if c.comm]
    assert {c.algo for c in with_comm} == {"Tree", "NVLSTree"}
    assert with_comm[0].comm == "0x55d0c2a1b6f0"


def test_summarize_filters_function_and_size():
    choices = nccl_log.parse_tuning(_read("constructed-2.28-8gpu-auto.log"))
    assert nccl_log.summarize(choices, "AllReduce", 1048576) == {
        "nccl_algo": "Ring", "nccl_proto": "LL128", "nccl_kernel": ""}
    # AllGather at the same size must not leak into the all-reduce row.
    assert nccl_log.summarize(choices, "AllGather", 1048576)["nccl_algo"] == "Ring"
    mixed = nccl_log.summarize(choices, "AllReduce", 4194304)
    assert set(mixed["nccl_algo"].split("+")) == {"Tree", "NVLSTree"}
    assert nccl_log.summarize(choices, "AllReduce", 12345) == {"nccl_algo": "", "nccl_proto": "", "nccl_kernel": ""}


def test_summarize_orders_by_frequency():
    text = "\n".join(["h:1:1 [0] NCCL INFO AllReduce: 64 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}"] * 3
                     + ["h:1:1 [0] NCCL INFO AllReduce: 64 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"])
    assert nccl_log.summarize(nccl_log.parse_tuning(text), "AllReduce", 64)["nccl_algo"] == "Tree+Ring"


def test_numeric_pre_2_19_format():
    choices = nccl_log.parse_tuning(_read("constructed-2.18-numeric.log"))
    assert [(c.func, c.size_bytes, c.algo, c.proto) for c in choices] == [
        ("AllReduce", 1048576, "Tree", "Simple"), ("", 2097152, "Ring", "LL128")]
    # Lines without a function name still count for the all-reduce summary.
    assert nccl_log.summarize(choices, "AllReduce", 2097152)["nccl_algo"] == "Ring"


def test_symmetric_kernels():
    choices = nccl_log.parse_tuning(_read("constructed-2.28-symmetric.log"))
    assert [c.algo for c in choices] == ["Symmetric"] * 3
    s = nccl_log.summarize(choices, "AllReduce", 16777216)
    assert s == {"nccl_algo": "Symmetric", "nccl_proto": "", "nccl_kernel": "AllReduce_RSxLD_AGxST"}
    assert choices[0].channels == 4


@pytest.mark.parametrize("value,expected", [
    (None, None), ("", None), ("Ring", {"Ring"}), ("ring,TREE", {"Ring", "Tree"}),
    ("NVLSTree", {"NVLSTree"}), ("CollNet", {"CollNetDirect", "CollNetChain"}),
    ("^NVLS,NVLSTree", {"Tree", "Ring", "CollNetDirect", "CollNetChain", "PAT"}),
    ("allreduce:tree;allgather:ring", {"Tree"}), ("allgather:ring", None),
    ("ring;allreduce:nvls", {"NVLS"}),
])
def test_requested_algos(value, expected):
    got = nccl_log.requested_algos(value, "AllReduce")
    assert (got if got is None else set(got)) == expected


def test_algo_honoured():
    assert nccl_log.algo_honoured("Ring", "Ring") is True
    assert nccl_log.algo_honoured("Tree", "Ring") is False
    assert nccl_log.algo_honoured("Tree,Ring", "Tree+Ring") is True
    assert nccl_log.algo_honoured("NVLS", "Ring+NVLS") is False
    assert nccl_log.algo_honoured("Ring", "Symmetric") is False  # symmetric kernels bypass NCCL_ALGO
    assert nccl_log.algo_honoured(None, "Ring") is None
    assert nccl_log.algo_honoured("Ring", "") is None  # nothing printed: unknown, not "honoured"


def test_debug_env_respects_user_settings(tmp_path):
    env = nccl_log.debug_env(tmp_path, current={})
    assert env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING",
                   "NCCL_DEBUG_FILE": str(tmp_path / "nccl-%h-%p.log")}
    kept = nccl_log.debug_env(tmp_path, current={"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "NET",
                                                  "NCCL_DEBUG_FILE": "/x/%h.log"})
    assert kept == {"NCCL_DEBUG_SUBSYS": "NET,TUNING"}
    assert nccl_log.debug_env(tmp_path, current={"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "INFO"


def test_resolve_debug_file():
    assert nccl_log.resolve_debug_file("/l/nccl-%h-%p.log", host="n1", pid=42) == Path("/l/nccl-n1-42.log")
    assert nccl_log.resolve_debug_file("", host="n1", pid=1) is None


def test_log_cursor_reads_only_new_complete_lines(tmp_path):
    log = tmp_path / "nccl.log"
    line = "h:1:1 [0] NCCL INFO AllReduce: {} Bytes -> Algo RING proto LL channel{{Lo..Hi}}={{0..0}}\n"
    log.write_text(line.format(8))
    cursor = nccl_log.LogCursor(log)  # starts at the end: earlier Cases' lines are not ours
    assert cursor.choices() == []
    with open(log, "a") as fh:
        fh.write(line.format(16) + line.format(32)[:20])  # last line still being written
    assert [c.size_bytes for c in cursor.choices()] == [16]
    with open(log, "a") as fh:
        fh.write(line.format(32)[20:])
    assert [c.size_bytes for c in cursor.choices()] == [32]
    assert nccl_log.LogCursor(tmp_path / "missing.log").choices() == []


@pytest.mark.parametrize("name,forced", [("h200-1rank-auto.log", ""), ("h200-1rank-Ring.log", "Ring")])
def test_real_h200_one_rank_logs(name, forced):
    # Written by NCCL 2.28.9 itself (tests/gpu/run_allreduce.sh, 1x H200, 2026-11-29).
    text = _read(name)
    assert "NCCL version 2.28.9" in text and "nranks 1" in text
    # With one rank NCCL copies locally and plans no algorithm: no choice, so "unknown", never "honoured".
    choices = nccl_log.parse_tuning(text)
    assert choices == []
    cols = nccl_log.summarize(choices, "AllReduce", 1048576)
    assert cols["nccl_algo"] == "" and nccl_log.algo_honoured(forced or None, cols["nccl_algo"]) is None


def test_resolve_debug_file_finds_short_host_name(tmp_path):
    (tmp_path / "nccl-node7-99.log").write_text("")
    got = nccl_log.resolve_debug_file(str(tmp_path / "nccl-%h-%p.log"), host="node7.cluster.local", pid=99)
    assert got == tmp_path / "nccl-node7-99.log"
