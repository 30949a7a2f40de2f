"""A benchmark's sweep keys never quietly mean something else: a factor of .nan or .inf, factor
with step, a key with its alias, a lower-case b (bits) and a sub-second timeout_s are refused by
`validate` with the file:line of the key (suite/sizes.py, suite/bench_keys.py, units.py)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.suite import load_suite
from commbench.units import parse_size

SUITE = """name: s
defaults: {{ranks: 2, warmup: 1, iters: 2}}
benchmarks:
  - name: b
    family: collectives
    ops: [all_reduce]
{extra}
"""


def refusal(tmp_path, extra: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(extra=extra))
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0)
    return str(info.value)


@pytest.mark.parametrize("factor", [".nan", ".inf", "-.inf", "1", "0.5", "'2'"])
def test_a_factor_that_is_not_a_finite_number_above_1_is_refused(tmp_path, factor):
    text = refusal(tmp_path, f"    backends: [mpi]\n    sizes: {{min: 8B, max: 1MiB, factor: {factor}}}")
    assert "s.yaml:8:" in text and "factor must be a finite number > 1" in text


def test_factor_with_step_is_refused_naming_both(tmp_path):
    text = refusal(tmp_path, "    backends: [mpi]\n    sizes: {min: 8B, max: 1MiB, factor: 2, step: 8}")
    assert "s.yaml:8:" in text and "factor" in text and "step" in text and "not both" in text


@pytest.mark.parametrize("alias, key", [("backend: mpi", "backends: [gloo]"), ("op: broadcast", "ops: [reduce]"),
                                        ("dtype: float32", "dtypes: [int32]")])
def test_a_key_and_its_alias_in_one_benchmark_are_refused(tmp_path, alias, key):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndefaults: {ranks: 2}\nbenchmarks:\n  - name: b\n    family: collectives\n"
                    f"    sizes: [8B]\n    {alias}\n    {key}\n")
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0)
    name = alias.split(":")[0]
    assert "s.yaml:7:" in str(info.value) and f"both {name!r} (line 7)" in str(info.value)
    assert "(line 8)" in str(info.value) and "keep one of them" in str(info.value)


def test_a_key_in_defaults_and_its_alias_in_the_benchmark_is_an_override(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ndefaults: {ranks: 2, backends: [gloo]}\nbenchmarks:\n"
                    "  - {name: b, family: collectives, ops: [all_reduce], backend: mpi, sizes: [8B]}\n")
    assert [c.backend for c in load_suite(path, gpu_count=0).cases] == ["mpi"]


@pytest.mark.parametrize("size", ["8b", "64kb", "1Mib", "2gb"])
def test_a_lower_case_b_is_bits_and_refused(tmp_path, size):
    with pytest.raises(ValueError, match="lower-case b means bits"):
        parse_size(size)
    text = refusal(tmp_path, f"    backends: [mpi]\n    sizes: [{size}]")
    assert "s.yaml:8:" in text and "bits" in text


@pytest.mark.parametrize("size, num_bytes", [("8B", 8), ("1kB", 1000), ("64KiB", 65536), ("2K", 2048)])
def test_byte_spellings_still_read(size, num_bytes):
    assert parse_size(size) == num_bytes


@pytest.mark.parametrize("value", ["0.5", "0", "-1", ".nan", "1e9"])
def test_timeout_s_outside_1s_to_30_days_says_the_range(tmp_path, value):
    text = refusal(tmp_path, f"    backends: [mpi]\n    timeout_s: {value}")
    assert "s.yaml:8:" in text and "from 1 to 2592000" in text


def test_timeout_s_of_a_second_and_a_half_is_kept(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(extra="    backends: [mpi]\n    sizes: [8B]\n    timeout_s: 1.5"))
    assert load_suite(path, gpu_count=0).cases[0].timeout_s == 1.5


def test_validate_exits_2_on_a_nan_factor_and_names_the_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(extra="    backends: [mpi]\n    sizes: {min: 8B, max: 64B, factor: .nan}"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "s.yaml:8:" in result.output, result.output
