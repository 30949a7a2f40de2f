"""`run --dry-run --estimate-from FOLDER` prices a schedule only from a run folder that can price
it (launch/waves.py): a folder that is not a run folder, a link to one that is not, launches with a
negative wall_s, rows with a negative time, or a folder that measured none of the suite's Cases are
exit 2 naming --estimate-from, before anything is printed."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder import RunFolder, case_row
from commbench.suite import load_suite

SUITE = ("name: s\ndefaults: {ranks: 2, warmup: 1, iters: 4, sizes: [8B, 64B]}\nbenchmarks:\n"
         "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce]}\n")


def suite_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    return path


def run_folder(tmp_path, wall_s=12.0, time_us=1000.0, suite="s"):
    """A run folder of the suite: one launch record, a row per Case."""
    cases = load_suite(suite_file(tmp_path), gpu_count=0).cases
    folder = RunFolder(tmp_path / "prev")
    folder.create(resume=False)
    for c in cases:
        row = case_row(c, world_size=2, num_nodes=1, ranks_per_node=2, log="logs/launch-0.log")
        row.update(time_us=time_us, status="ok")
        folder.append_row(row)
    folder.write_meta({"suite": suite, "launches": [{"launch_id": 0, "log": "logs/launch-0.log", "wall_s": wall_s}]})
    return tmp_path / "prev"


def dry_run(tmp_path, estimate_from):
    return CliRunner().invoke(cli, ["run", str(suite_file(tmp_path)), "--dry-run", "--estimate-from",
                                    str(estimate_from)])


def test_a_run_folder_of_the_suite_prices_the_schedule(tmp_path):
    result = dry_run(tmp_path, run_folder(tmp_path))
    assert result.exit_code == 0, result.output
    assert "projected wall time 0m12s" in result.output


def test_a_folder_of_suites_is_not_a_run_folder(tmp_path):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "x.yaml").write_text(SUITE)
    result = dry_run(tmp_path, tmp_path / "suites")
    assert result.exit_code == 2 and "--estimate-from" in result.output and "not a run folder" in result.output
    assert "launch" not in result.output.split("error:")[0]   # refused before the plan is printed


def test_a_link_to_etc_is_not_a_run_folder(tmp_path):
    (tmp_path / "etc").symlink_to("/etc")
    result = dry_run(tmp_path, tmp_path / "etc")
    assert result.exit_code == 2 and "--estimate-from" in result.output and "not a run folder" in result.output


def test_a_negative_wall_s_is_refused_naming_the_flag_and_the_record(tmp_path):
    result = dry_run(tmp_path, run_folder(tmp_path, wall_s=-30.0))
    assert result.exit_code == 2, result.output
    assert "--estimate-from" in result.output and "launches[0]" in result.output and "run.json" in result.output


def test_a_negative_row_time_is_refused(tmp_path):
    result = dry_run(tmp_path, run_folder(tmp_path, time_us=-5.0))
    assert result.exit_code == 2 and "--estimate-from" in result.output and "negative" in result.output


def test_a_run_json_without_a_suite_is_not_commbench_s(tmp_path):
    prev = run_folder(tmp_path)
    meta = json.loads((prev / "run.json").read_text())
    del meta["suite"]
    (prev / "run.json").write_text(json.dumps(meta))
    result = dry_run(tmp_path, prev)
    assert result.exit_code == 2 and "names no suite" in result.output


def test_a_run_folder_that_measured_none_of_the_cases_is_refused(tmp_path):
    prev = run_folder(tmp_path)
    (tmp_path / "s.yaml").write_text(SUITE.replace("[8B, 64B]", "[1KiB]"))
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "s.yaml"), "--dry-run", "--estimate-from", str(prev)])
    assert result.exit_code == 2 and "none of the 1 Cases" in result.output, result.output


@pytest.mark.parametrize("command", ["run", "accept"])
def test_accept_and_run_refuse_the_same_folder(tmp_path, command):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, [command, str(suite_file(tmp_path)), "--dry-run", "--estimate-from",
                                      str(tmp_path / "empty")])
    assert result.exit_code == 2 and "--estimate-from" in result.output and "not a run folder" in result.output
