"""nccl-tests' option names live in one table: `commbench nccl` takes them, an import reads them,
and `-f` that is not a size factor is refused (it used to become a 1 MiB step)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.analysis.nccl_tests_options import OPTIONS, RANK_TIME, RANK_TIME_RUNNABLE, REGISTER
from commbench.analysis.quick import QuickArgs, suite_dict
from commbench.cli import cli
from commbench.errors import CommbenchError


def test_the_nccl_command_takes_every_option_of_the_table():
    command = cli.get_command(None, "nccl")
    spelled = {opt for p in command.params for opt in p.opts}
    for option in OPTIONS.values():
        assert f"-{option.short}" in spelled and f"--{option.long}" in spelled, option


def test_an_import_reads_a_sum_a_run_cannot_time_it():
    assert RANK_TIME[4] == "sum" and 4 not in RANK_TIME_RUNNABLE and set(REGISTER) == {0, 1, 2}


@pytest.mark.parametrize("factor", [0.0, -2.0, float("nan"), float("inf"), 0.5])
def test_a_step_factor_that_is_not_one_is_refused(factor):
    with pytest.raises(CommbenchError, match=r"^-f .*must be above 1"):
        suite_dict(QuickArgs(op="all_reduce", backend="mpi", min_bytes="8", max_bytes="64", step_factor=factor))


def test_the_refusal_is_exit_2_before_anything_runs(tmp_path):
    res = CliRunner().invoke(cli, ["nccl", "all_reduce", "--backend", "mpi", "-f", "0", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "-f 0" in res.output and not (tmp_path / "r").exists()


def test_a_factor_of_one_steps_by_i():
    bench = suite_dict(QuickArgs(op="all_reduce", backend="mpi", min_bytes="8", max_bytes="64",
                                 step_factor=1.0, step_bytes="8"))["benchmarks"][0]
    assert bench["sizes"] == {"min": 8, "max": 64, "step": 8}
