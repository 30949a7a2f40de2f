"""Issue 31, item 11: labels say what was held, limits refuse what they cannot read, messages name
the right thing, folder names fit the file-name limit, repeat sets say what is odd about them."""
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench import safety
from commbench.analysis import runsets
from commbench.cli import cli
from commbench.launch import group
from commbench.runfolder import new_run_dir
from commbench.suite import load_suite

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
BENCH = "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2"


@pytest.fixture
def no_site_switches(monkeypatch):
    for key in safety.KILL_SWITCHES:
        monkeypatch.delenv(key, raising=False)


def test_a_switch_the_suite_turns_on_is_labelled_as_held(tmp_path, no_site_switches):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n" + BENCH + ", env: {NCCL_NVLS_ENABLE: '1', NCCL_ALGO: Ring}}\n")
    suite = load_suite(path, gpu_count=0)
    (case,) = suite.cases
    assert "NCCL_NVLS_ENABLE=1" not in case.variant and "NCCL_NVLS_ENABLE=0 (held" in case.variant
    assert "NCCL_ALGO=Ring" in case.variant
    # what the ranks get, and what run.json's launch says they got
    assert safety.launch_env(tmp_path, dict(case.env), allow_multicast=False)["NCCL_NVLS_ENABLE"] == "0"
    record = group.launch_record(suite.launches[0], held_off=True)
    assert record["env"]["NCCL_NVLS_ENABLE"] == "0" and record["env_not_held"] == {"NCCL_NVLS_ENABLE": "1"}
    assert record["status"] == "running"


def test_an_opted_in_case_keeps_its_label(tmp_path, no_site_switches):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n  - {name: a, family: allreduce, ranks: 2, sizes: [1MiB], "
                    "params: {allow_multicast: true}, env: {NCCL_NVLS_ENABLE: '1'}}\n")
    suite = load_suite(path, gpu_count=2)
    assert all(c.variant == "NCCL_NVLS_ENABLE=1" for c in suite.cases)
    assert "env_not_held" not in group.launch_record(suite.launches[0], held_off=False)


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


def test_a_long_cjk_suite_name_fits_the_file_name_limit(tmp_path):
    path = new_run_dir(tmp_path, "测" * 200)
    assert path.is_dir() and len(path.name.encode()) <= 255
    assert path.name.encode().decode() == path.name and path.name.endswith("测")


def _repeat_set(tmp_path: Path, second: str) -> Path:
    out = tmp_path / "set"
    out.mkdir()
    shutil.copytree(FIXTURES / "quiet-pair-a", out / "repeat-1")
    shutil.copytree(FIXTURES / second, out / "repeat-2")
    return out


def test_a_repeat_of_another_suite_is_named(tmp_path, capsys):
    out = _repeat_set(tmp_path, "quiet-pair-b")
    meta = json.loads((out / "repeat-2" / "run.json").read_text())
    meta["suite"] = "other"
    (out / "repeat-2" / "run.json").write_text(json.dumps(meta))
    assert len(runsets.load_side([out])) == 2
    err = capsys.readouterr().err
    assert "warning:" in err and "2 different suites" in err and "other" in err


def test_a_copied_repeat_and_a_folder_named_twice_are_named(tmp_path, capsys):
    out = _repeat_set(tmp_path, "quiet-pair-a")
    runsets.load_side([out])
    assert "holds the same run as" in capsys.readouterr().err
    runsets.load_side([FIXTURES / "quiet-pair-a", FIXTURES / "quiet-pair-b", FIXTURES / "quiet-pair-a"])
    assert "counted twice" in capsys.readouterr().err
    runsets.load_side([FIXTURES / "quiet-pair-a", FIXTURES / "quiet-pair-b"])
    assert capsys.readouterr().err == ""
