"""The suite reader's limits (suite/limits.py) refuse a COMMBENCH_MAX_YAML_* value that is not a
positive whole number, and a long word in a suite is not called a number."""
import pytest
from click.testing import CliRunner

from commbench.cli import cli

BENCH = "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2"


@pytest.mark.parametrize("var", ["COMMBENCH_MAX_YAML_NODES", "COMMBENCH_MAX_YAML_BYTES"])
@pytest.mark.parametrize("value", ["abc", "-5", "0", "1e9", "٣"])
def test_a_limit_variable_that_is_not_a_number_is_refused(tmp_path, monkeypatch, var, value):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n" + BENCH + "}\n")
    monkeypatch.setenv(var, value)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and f"{var}=" in result.output and "positive whole number" in result.output


def test_a_long_word_is_not_called_a_number(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n  - {name: " + "x" * 5000 + BENCH[12:] + "}\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert "a number" not in result.output, result.output[:300]
    path.write_text("name: s\nbenchmarks:\n" + BENCH + ", iters: " + "1" * 5000 + "}\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "a number of 5000 characters" in result.output
