"""`commbench nccl` loads the suite its options make from a temporary file: a problem found there
is told as the option that set it (commands/nccl_errors.py), never as a line of that file."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.commands.nccl_errors import in_flag_terms
from commbench.errors import SuiteError


@pytest.mark.parametrize("args, option, words", [
    (["-b", "0", "-e", "8"], "-b/-e/-f/-i", "min must be > 0"),
    (["-e", "2T"], "-b/-e/-f/-i", "above the largest size"),
    (["-f", "1", "-i", "1", "-e", "1G"], "-b/-e/-f/-i", "sizes, more than"),
    (["-g", "100000"], "-g", "ranks is more than"),
])
def test_a_problem_of_the_options_suite_names_the_flag_not_a_temp_file(args, option, words):
    result = CliRunner().invoke(cli, ["nccl", "all_reduce", "--backend", "mpi", "-g", "2", *args])
    assert result.exit_code == 2, result.output
    assert f"  {option}: " in result.output and words in result.output, result.output
    assert "commbench-quick-" not in result.output and ".yaml" not in result.output
    assert "--max-ranks" not in result.output and "--max-cases" not in result.output


def test_a_lower_case_b_size_names_the_flag():
    result = CliRunner().invoke(cli, ["nccl", "all_reduce", "--backend", "mpi", "-g", "2", "-b", "8b"])
    assert result.exit_code == 2 and "-b 8b:" in result.output and "bits" in result.output


def test_the_translation_keeps_other_errors_and_names_every_field(tmp_path):
    path = tmp_path / "quick-all_reduce.yaml"
    exc = SuiteError(f"{path}: invalid suite (2 problem(s))\n"
                     f"  {path}:9: benchmarks[0] (mpi-all_reduce).params.register: bad\n"
                     f"  {path}:4: benchmarks[0].iters: worse")
    assert str(in_flag_terms(exc, path)) == "commbench nccl: bad options (2 problem(s))\n  -R: bad\n  -n: worse"
    other = SuiteError("something else")
    assert in_flag_terms(other, path) is other and str(other) == "something else"
