"""The line-aware YAML loader (suite/yaml_lines.py) on inputs that used to slip through or lose
their line: a raw NUL byte, a NUL spelt in a quoted string, control characters in a name, and
merge keys followed by an override (YAML's merge-key rule: the mapping's own key wins)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.analysis.accept.rules import RulesError, load_rules
from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.suite import load_suite
from commbench.suite.yaml_lines import load_yaml

BENCH = "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2}\n"


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_a_raw_nul_byte_is_a_syntax_error_with_its_line(tmp_path):
    path = write(tmp_path, b"name: s\nbenchmarks:\n  - name: a\x00b\n")
    with pytest.raises(SuiteError) as info:
        load_yaml(path)
    assert f"{path}:3: YAML syntax error" in str(info.value) and "U+0000" in str(info.value)


def test_validate_names_the_line_of_a_raw_nul_byte(tmp_path):
    path = write(tmp_path, b"name: s\n\n\nbenchmarks: []\x00\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "s.yaml:4:" in result.output, result.output


@pytest.mark.parametrize("spelling", ['"a\\0b"', '"a\\x00b"', '"a\\u0000b"'])
def test_a_nul_spelt_in_a_quoted_name_is_refused(tmp_path, spelling):
    path = write(tmp_path, f"name: s\nbenchmarks:\n  - name: {spelling}\n    family: collectives\n")
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0)
    assert f"{path}:3:" in str(info.value) and "NUL" in str(info.value)


def test_a_nul_in_an_env_value_is_refused(tmp_path):
    path = write(tmp_path, "name: s\nbenchmarks:\n  - name: b\n    family: collectives\n"
                           "    env: {NCCL_DEBUG: \"IN\\0FO\"}\n")
    with pytest.raises(SuiteError, match=r"s\.yaml:5:.*NUL"):
        load_suite(path, gpu_count=0)


def test_a_nul_in_a_rules_file_is_refused_with_its_line(tmp_path):
    path = write(tmp_path, 'rules:\n  - {name: "r\\0", metric: time_us, op: "<=", value: 1}\n', "r.yaml")
    with pytest.raises(RulesError, match=r"r\.yaml:2:.*NUL"):
        load_rules(path)


@pytest.mark.parametrize("name", ['"a\\x1b[31mred"', '"two\\nlines"', '"tab\\there"', '"del\\x7f"'])
def test_a_control_character_in_a_benchmark_name_is_refused(tmp_path, name):
    path = write(tmp_path, f"name: s\nbenchmarks:\n  - name: {name}\n    family: collectives\n")
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0)
    assert f"{path}:3: benchmarks[0].name:" in str(info.value) and "control character" in str(info.value)


def test_a_key_after_a_merge_key_overrides_the_merged_one(tmp_path):
    path = write(tmp_path, "name: s\ndescription: &base {family: collectives, backends: [mpi], ranks: 2,\n"
                           "  ops: [all_reduce], sizes: [8B]}\nbenchmarks:\n  - <<: *base\n    name: b\n"
                           "    ranks: 1\n")
    raw = load_yaml(path)
    bench = raw["benchmarks"][0]
    assert bench["ranks"] == 1 and bench.line_of("ranks") == 7 and bench["family"] == "collectives"
    assert [c.ranks for c in load_suite(path, gpu_count=0).cases] == [1]


def test_of_several_merged_mappings_the_first_listed_wins(tmp_path):
    path = write(tmp_path, "a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc:\n  <<: [*a, *b]\n")
    assert dict(load_yaml(path)["c"]) == {"x": 1, "y": 2}


def test_a_key_written_twice_in_one_mapping_is_still_refused(tmp_path):
    path = write(tmp_path, "a: &a {x: 1}\nc:\n  <<: *a\n  x: 2\n  x: 3\n")
    with pytest.raises(SuiteError, match=r":5: x: duplicate key"):
        load_yaml(path)


def test_validate_accepts_a_merge_then_override(tmp_path):
    path = write(tmp_path, "name: s\ndescription: &b {family: collectives, backends: [gloo]}\nbenchmarks:\n"
                           "  - <<: *b\n    name: x\n    backends: [mpi]\n    ops: [all_reduce]\n    sizes: [8B]\n"
                           "    ranks: 2\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert [c.backend for c in load_suite(path, gpu_count=0).cases] == ["mpi"]


@pytest.mark.parametrize("name", ['"q\\x1b]0;x\\x07"', '"two\\nlines"'])
def test_a_control_character_in_the_suite_name_is_refused_before_a_folder_exists(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, f"name: {name}\nbenchmarks:\n{BENCH}")
    for args in (["validate", str(path)], ["run", str(path), "--dry-run"], ["run", str(path), "--quiet"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "s.yaml:1: name:" in result.output and "control character" in result.output
    assert not (tmp_path / "results").exists()
