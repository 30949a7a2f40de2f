"""Suite loading: expansion, launch grouping, and errors that name file, line and field."""
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.suite import default_iters, load_suite

GOOD = """\
name: t
defaults:
  ranks: 2
  sizes: {min: 8B, max: 64B, factor: 2}
benchmarks:
  - name: a
    family: collectives
    ops: [all_reduce, broadcast]
    backends: [mpi]
    env: {NCCL_ALGO: [Ring, Tree], NCCL_PROTO: Simple}
    params: {in_place: [true, false]}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_expansion_is_cross_product(tmp_path):
    s = load_suite(write(tmp_path, GOOD), gpu_count=0)
    # 2 env variants x 2 ops x 2 in_place x 4 sizes (8, 16, 32, 64)
    assert len(s.cases) == 32
    assert sorted({c.size_bytes for c in s.cases}) == [8, 16, 32, 64]
    assert {c.variant for c in s.cases} == {"NCCL_ALGO=Ring", "NCCL_ALGO=Tree"}
    # each environment variant is its own launch (fresh processes)
    assert len(s.launches) == 2
    assert all(dict(l.env)["NCCL_PROTO"] == "Simple" for l in s.launches)
    assert len({c.case_id for c in s.cases}) == 32


def test_case_ids_are_stable(tmp_path):
    a = load_suite(write(tmp_path, GOOD), gpu_count=0)
    b = load_suite(write(tmp_path, GOOD, "again.yaml"), gpu_count=0)
    assert [c.case_id for c in a.cases] == [c.case_id for c in b.cases]


def test_ranks_all_uses_gpu_count(tmp_path):
    text = GOOD.replace("ranks: 2", "ranks: all")
    assert {c.ranks for c in load_suite(write(tmp_path, text), gpu_count=8).cases} == {8}
    assert {c.ranks for c in load_suite(write(tmp_path, text), gpu_count=0).cases} == {1}


def test_small_factor_sweep_has_no_duplicate_sizes(tmp_path):
    text = GOOD.replace("sizes: {min: 8B, max: 64B, factor: 2}", "sizes: {min: 1, max: 16, factor: 1.5}")
    sizes = sorted({c.size_bytes for c in load_suite(write(tmp_path, text), gpu_count=0).cases})
    assert sizes == [1, 2, 3, 5, 8, 11]


def test_iteration_defaults_scale_down_for_large_messages():
    assert default_iters(1 << 20, warmup=False) == 20
    assert default_iters(1 << 30, warmup=False) == 5
    assert default_iters(256 << 20, warmup=False) == 5
    assert default_iters(128 << 20, warmup=False) == 10
    assert default_iters(1 << 30, warmup=True) == 2


BAD = [
    # (description, suite text, expected fragments: line and field)
    ("unknown top key", "name: t\nbenchmark: []\n", [":2:", "benchmark", "unknown key"]),
    ("unknown bench key", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizez: 8B\n",
     [":5:", "sizez", "unknown key"]),
    ("bad size", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizes: [8B, 12XB]\n",
     [":5:", "sizes", "12XB"]),
    ("unknown family", "name: t\nbenchmarks:\n  - name: a\n    family: nope\n", [":4:", "family", "nope"]),
    ("unknown op", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    ops: [allreduce]\n",
     [":5:", "ops", "allreduce"]),
    ("unknown backend", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    backend: rccl\n",
     [":5:", "backends", "rccl"]),
    ("wrong type", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    iters: many\n",
     [":5:", "iters", "many"]),
    ("wrong param type", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    params: {in_place: 3}\n",
     [":5:", "in_place"]),
    ("unknown param", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    params:\n      inplace: true\n",
     [":6:", "inplace", "unknown parameter"]),
    ("yaml syntax", "name: t\nbenchmarks:\n  - name: a\n    family: [collectives\n", ["YAML syntax error"]),
    ("not a mapping", "- 1\n- 2\n", ["mapping"]),
    ("missing benchmarks", "name: t\n", ["benchmarks", "required"]),
    ("bad sweep", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizes: {min: 1KiB, max: 8B}\n",
     [":5:", "sizes", "above max"]),
    ("bad timing", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    timing: fast\n",
     [":5:", "timing", "fast"]),
    ("bad ranks", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    ranks: 0\n", [":5:", "ranks"]),
    ("duplicate key", "name: t\nname: u\nbenchmarks: []\n", [":2:", "duplicate key"]),
    ("bad env value", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    env: {NCCL_ALGO: {x: 1}}\n",
     ["env.NCCL_ALGO"]),
    ("nan timeout", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    timeout_s: .nan\n",
     [":5:", "timeout_s"]),
    ("inf iters", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    iters: .inf\n", [":5:", "iters"]),
    ("float warmup", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    warmup: 2.5\n",
     [":5:", "warmup", "whole number"]),
    ("bad env name", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    env: {\"A=B\": x}\n",
     [":5:", "env", "not a valid environment variable name"]),
    ("unhashable key", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    ? [x, y]\n    : 1\n",
     [":5:", "plain value"]),
    ("empty ops", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    ops: []\n", [":5:", "ops", "empty"]),
    ("empty sizes", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizes: []\n", [":5:", "no sizes"]),
    ("duplicate sizes", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizes: [1KiB, 1024]\n",
     [":5:", "twice"]),
    ("inverted step sweep",
     "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    sizes: {min: 1MiB, max: 1KiB, step: 1KiB}\n",
     [":5:", "above max"]),
    ("empty param list", "name: t\nbenchmarks:\n  - name: a\n    family: collectives\n    params: {in_place: []}\n",
     [":5:", "in_place", "empty"]),
]


@pytest.mark.parametrize("desc,text,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_suite_errors_name_line_and_field(tmp_path, desc, text, fragments):
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as exc:
        load_suite(path, gpu_count=0)
    msg = str(exc.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, (frag, msg)


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("desc,text,fragments", BAD[:6], ids=[b[0] for b in BAD[:6]])
def test_cli_exits_2_without_traceback(tmp_path, command, desc, text, fragments):
    path = write(tmp_path, text)
    out = ["--out", str(tmp_path / "o")] if command == "run" else []
    result = CliRunner().invoke(cli, [command, str(path), *out])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "commbench: error:" in result.output
    assert not (tmp_path / "o").exists()  # nothing created for a bad suite


def test_missing_file_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_shipped_suites_validate(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("COMMBENCH_HOSTS", "n1,n2,n3,n4")  # placement: pairs needs several hosts
    root = Path(__file__).resolve().parents[2] / "suites"
    for p in sorted(root.glob("*.yaml")):
        load_suite(p, gpu_count=8)


def test_set_overrides_every_benchmark(tmp_path):
    from commbench.suite import parse_overrides

    over = parse_overrides(["ranks=4", "sizes=[1KiB]", "params.in_place=true", "op=all_reduce"])
    s = load_suite(write(tmp_path, GOOD), gpu_count=0, overrides=over)
    assert {c.ranks for c in s.cases} == {4}
    assert {c.size_bytes for c in s.cases} == {1024}
    assert {c.param("in_place") for c in s.cases} == {True}
    assert {c.op for c in s.cases} == {"all_reduce"}


@pytest.mark.parametrize("item", ["rank=2", "noequals", "params=1", "name=x"])
def test_bad_set_is_a_clear_error(item):
    from commbench.suite import parse_overrides

    with pytest.raises(SuiteError, match="--set"):
        parse_overrides([item])


def test_cli_set_reaches_validation(tmp_path):
    result = CliRunner().invoke(cli, ["validate", str(write(tmp_path, GOOD)), "--set", "iters=0"])
    assert result.exit_code == 2 and "iters" in result.output


def test_only_keeps_the_named_benchmarks_and_rejects_unknown_names():
    root = Path(__file__).resolve().parents[2] / "suites"
    full = load_suite(root / "moe.yaml", gpu_count=8)
    only = load_suite(root / "moe.yaml", gpu_count=8, overrides={"only": ["low-latency-graph"]})
    assert {c.bench for c in only.cases} == {"low-latency-graph"}
    assert {c.case_id for c in only.cases} <= {c.case_id for c in full.cases}  # same ids: --resume works
    full_launches = {l.launch_id: set(l.case_ids) for l in full.launches}
    for launch in only.launches:   # launch ids are the whole suite's (logs/launch-N.log stay apart)
        assert set(launch.case_ids) <= full_launches[launch.launch_id]
    assert len(only.launches) < len(full.launches)
    with pytest.raises(SuiteError, match="no such benchmark"):
        load_suite(root / "moe.yaml", gpu_count=8, overrides={"only": ["nope"]})
    small = load_suite(root / "moe.yaml", gpu_count=8,
                       overrides={"only": ["small-check"], "ranks": 2})
    result = CliRunner().invoke(cli, ["validate", str(root / "moe.yaml"), "--only", "small-check",
                                      "--set", "ranks=2"])
    assert result.exit_code == 0 and f"ok: {len(small.cases)} cases" in result.output
    assert len(small.cases) < len(full.cases)
