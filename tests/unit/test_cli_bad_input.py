"""Hostile suites, `--set` values and rules files: each ends with exit 2, file:line where there is
one, a short message and no traceback (issue 21, item 2)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"
GOOD = """name: s
defaults: {ranks: 2, sizes: [8B], warmup: 1, iters: 2}
benchmarks:
  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce]}
"""
MAX_MESSAGE_CHARS = 4000
RULE = "rules:\n  - {name: r, select: {op: all_reduce}, metric: busbw_gbps, op: '>=', value: 0}\n"


def invoke(args: list[str]):
    t0 = time.time()
    result = CliRunner().invoke(cli, args)
    elapsed = time.time() - t0
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: traceback instead of a message: {result.exception!r}") from result.exception
    assert elapsed < 20, f"{args}: {elapsed:.1f} s"
    assert "Traceback" not in result.output and "this is a bug in commbench" not in result.output, result.output
    return result


def assert_refused(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith("commbench: error: ") or "commbench: error: " in result.output
    assert len(result.output) < MAX_MESSAGE_CHARS, f"{len(result.output)} characters"
    for needle in needles:
        assert needle in result.output, result.output


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nname: s\nbenchmarks: *a{levels - 1}\n"


SUITES = {
    # name: (file bytes or text, what the message must say)
    "binary": (b"\x00\x01\x02\xff\xfe" * 50, ":1: not UTF-8"),
    "utf16": (GOOD.encode("utf-16"), "UTF-16"),
    "latin1 comment": ((GOOD + "# caf\xe9\n").encode("latin-1"), ".yaml:5: not UTF-8"),
    "deep lists": ("name: s\nbenchmarks: " + "[" * 3000 + "]" * 3000 + "\n", ".yaml:2: nesting deeper"),
    "deep maps": ("name: s\nbenchmarks: " + "{a: " * 500 + "1" + "}" * 500 + "\n", "nesting deeper"),
    "alias bomb 10": (_alias_bomb(10), "once aliases are expanded"),
    "alias bomb 6": (_alias_bomb(6), "COMMBENCH_MAX_YAML_NODES"),
    "recursive alias": ("name: s\nbenchmarks: &b [*b]\n", "recursive"),
    "family list": (GOOD.replace("family: collectives", "family: [collectives]"), ".yaml:4:", "family"),
    "family set tag": (GOOD.replace("family: collectives", "family: !!set {collectives}"), "!!set"),
    "binary tag": (GOOD.replace("name: s", "name: !!binary aGVsbG8="), "!!binary"),
    "huge size string": (GOOD.replace("[8B]", "['" + "9" * 400 + "GiB']"), ".yaml:2:", "bad size"),
    "size beyond 1TiB": (GOOD.replace("[8B]", "[2TiB]"), "above the largest size"),
    "huge integer": (GOOD.replace("ranks: 2", "ranks: " + "9" * 5000), ".yaml:2:", "a number of 5000"),
    "env NUL": (GOOD.replace("ops: [all_reduce]", 'ops: [all_reduce], env: {NCCL_ALGO: "a\\0b"}'), ".yaml:4:", "NUL"),
    "env too long": (GOOD.replace("ops: [all_reduce]", "ops: [all_reduce], env: {NCCL_ALGO: " + "x" * 300000 + "}"),
                     "300000 characters"),
    "env name newline": (GOOD.replace("ops: [all_reduce]", 'ops: [all_reduce], env: {"NCCL_ALGO\\n": x}'),
                         "not a valid environment variable name"),
    "complex key": ("name: s\n? [a, b]\n: 1\nbenchmarks: []\n", ".yaml:2:", "plain value"),
    "huge key": (GOOD + "? " + "k" * 100000 + "\n: 1\n", ".yaml:5:", "unknown key"),
    "empty file": ("", "a suite is a mapping"),
    "duplicate key": (GOOD + "name: t\n", ".yaml:5:", "duplicate key"),
    "null timeout and bad iters": (GOOD.replace("iters: 2", "iters: 2, timeout_s: null, warmup: -1"), "warmup"),
}


@pytest.mark.parametrize("name", list(SUITES))
def test_hostile_suite_is_refused_by_validate(tmp_path, name):
    data, *needles = SUITES[name]
    path = tmp_path / "s.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    assert_refused(invoke(["validate", str(path)]), *needles)


def test_run_refuses_before_creating_a_folder(tmp_path):
    """validate and run agree: a suite validate refuses never starts a run (env NUL used to crash mid-run)."""
    path = tmp_path / "s.yaml"
    path.write_text(SUITES["env NUL"][0])
    out = tmp_path / "run"
    assert_refused(invoke(["run", str(path), "--out", str(out), "--quiet"]), "NUL")
    assert not out.exists()


@pytest.mark.parametrize("item, needle", [
    ("params.in_place=" + "[" * 3000, "nesting deeper"),
    ("sizes={a: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,"
     "*b,*b], d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d], "
     "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]}", "aliases are expanded"),
    ("env.PYTHONPATH=/x", "expected KEY=VALUE"),
    ("ranks", "expected KEY=VALUE"),
    ("params.=1", "expected KEY=VALUE"),
    ("sizes=[1KiB, 1KiB]", "listed twice"),
    ("ranks=" + "9" * 5000, "a number of 5000 characters"),
    ("env={NCCL_ALGO: [a, a]}", "listed twice"),
])
def test_hostile_set_is_refused(tmp_path, item, needle):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    assert_refused(invoke(["validate", str(path), "--set", item]), needle)


def test_set_values_do_not_claim_suite_lines(tmp_path):
    """An error in a `--set` mapping names the benchmark's line in the suite, not line 1 of the
    command-line text."""
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    result = invoke(["validate", str(path), "--set", "env={NCCL_ALGO: [[1]]}"])
    assert_refused(result, "s.yaml:4:")


RULES = {
    "duplicate value": ("rules:\n  - {name: r, metric: busbw_gbps, op: '>=', value: 1000000, value: 0}\n",
                        ":2:", "duplicate key"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00" * 20, "not UTF-8"),
    "deep": ("rules: " + "[" * 2000 + "]" * 2000 + "\n", "nesting deeper"),
    "complex key": ("rules:\n  - ? [a]\n    : 1\n", ":2:", "plain value"),
    "nan value": (RULE.replace("value: 0", "value: .nan"), ":2:", "finite number"),
    "inf value": (RULE.replace("value: 0", "value: .inf"), "finite number"),
    "nan string": (RULE.replace("value: 0", "value: 'nan'"), "finite number"),
    "huge int value": (RULE.replace("value: 0", "value: " + "9" * 400), "finite number"),
    "nan pct": ("rules:\n  - {name: r, metric: time_us, op: within_pct_of, pct: .nan}\n", "'pct'"),
    "nan localize": (RULE + "localize: {min_excess_pct: .nan}\n", ":3:", "localize.min_excess_pct"),
    "string localize": (RULE + "localize: {z_threshold: '3'}\n", "localize.z_threshold"),
    "nan range": ("rules:\n  - {name: r, select: {busbw_gbps: {min: .nan}}, metric: busbw_gbps, op: '>=', "
                  "value: 0}\n", "select.busbw_gbps"),
    "huge field": ("rules:\n  - name: r\n    metric: busbw_gbps\n    op: '>='\n    value: 0\n    ? "
                   + "z" * 100000 + "\n    : 1\n", "unknown key"),
    "alias bomb": (_alias_bomb(9).replace("name: s\nbenchmarks:", "rules:"), "aliases are expanded"),
}


@pytest.mark.parametrize("name", list(RULES))
def test_hostile_rules_are_refused_by_accept(tmp_path, name):
    data, *needles = RULES[name]
    path = tmp_path / "rules.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    result = invoke(["accept", str(RUN), "--rules", str(path), "--out", str(tmp_path / "a.html")])
    assert_refused(result, *needles)


@pytest.mark.parametrize("target", ["bin.yaml", "bin.dat"])
def test_accept_on_a_binary_target_is_refused(tmp_path, target):
    path = tmp_path / target
    path.write_bytes(b"\xff\x00rules\xfe" * 100)
    assert_refused(invoke(["accept", str(path)]), "not UTF-8")


def test_unwritable_outputs_are_refused(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    assert_refused(invoke(["report", str(RUN), "--out", str(blocker / "r.html")]), "not a folder")
    result = invoke(["accept", str(RUN), "--rules", str(rules), "--out", str(tmp_path / "a.html"),
                     "--junit", str(blocker / "j.xml")])
    assert_refused(result, "cannot write", "j.xml")


@pytest.mark.parametrize("how", ["file/sub", "dangling link", "a file"])
def test_run_out_that_cannot_be_a_folder_is_refused(tmp_path, how):
    suite = tmp_path / "s.yaml"
    suite.write_text(GOOD)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "missing" / "x")
    out = {"file/sub": tmp_path / "afile" / "sub", "dangling link": tmp_path / "link",
           "a file": tmp_path / "afile"}[how]
    assert_refused(invoke(["run", str(suite), "--out", str(out), "--quiet"]), str(out))


def test_an_unexpected_error_is_one_message_not_a_traceback(tmp_path, monkeypatch):
    """The last line of defence: a bug still ends in one paragraph (and the traceback on request)."""
    import commbench.suite as suite_pkg

    def broken(*args, **kwargs):
        raise TypeError("x" * 10000)

    monkeypatch.setattr(suite_pkg, "load_suite", broken)
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "unexpected TypeError" in result.output
    assert "COMMBENCH_DEBUG=1" in result.output and len(result.output) < 1000
    monkeypatch.setenv("COMMBENCH_DEBUG", "1")
    assert isinstance(CliRunner().invoke(cli, ["validate", str(path)]).exception, TypeError)
