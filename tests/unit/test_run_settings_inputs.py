"""A suite's run settings (suite/settings.py) and `run --duration` are refused the same way by
`validate`, `run --dry-run` and `run`: exit 2 naming the flag, key or variable, before any run
folder exists."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import cli

SUITE = ("name: s\n{extra}defaults: {{ranks: 2, warmup: 1, iters: 2, sizes: [8B]}}\nbenchmarks:\n"
         "  - {{name: b, family: collectives, backends: [mpi], ops: [all_reduce]}}\n")


def invoke(tmp_path, monkeypatch, args, extra="", env=None):
    monkeypatch.chdir(tmp_path)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(extra=extra))
    return CliRunner().invoke(cli, [a.replace("SUITE", str(path)) for a in args])


COMMANDS = [["validate", "SUITE"], ["run", "SUITE", "--dry-run"], ["run", "SUITE", "--out", "out"]]


def no_folder(tmp_path):
    return not (tmp_path / "results").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("duration", ["garbage", "-5m", "0", "nan", "1e9h", "inf", "31d"])
def test_run_dry_run_refuses_a_bad_duration_naming_the_flag(tmp_path, monkeypatch, duration):
    for args in (["run", "SUITE", "--dry-run", f"--duration={duration}"],
                 ["run", "SUITE", "--out", "out", f"--duration={duration}"]):
        result = invoke(tmp_path, monkeypatch, args)
        assert result.exit_code == 2 and "--duration" in result.output, result.output
        assert no_folder(tmp_path)


@pytest.mark.parametrize("key", ["duration: -1h", "duration: 0", "wave_timeout: -5", "wave_timeout: .nan",
                                 "launch_retries: abc", "launch_retries: 11", "launch_retries: -1"])
@pytest.mark.parametrize("args", COMMANDS)
def test_a_bad_suite_setting_is_refused_alike_with_its_line(tmp_path, monkeypatch, key, args):
    result = invoke(tmp_path, monkeypatch, args, extra=key + "\n")
    assert result.exit_code == 2 and f"s.yaml:2: {key.split(':')[0]}:" in result.output, result.output
    assert no_folder(tmp_path)


@pytest.mark.parametrize("var, value", [("COMMBENCH_LAUNCH_RETRIES", "abc"), ("COMMBENCH_WAVE_TIMEOUT", "-5"),
                                        ("COMMBENCH_WAVE_TIMEOUT", "0"), ("COMMBENCH_LAUNCH_RETRIES", "99")])
@pytest.mark.parametrize("args", COMMANDS)
def test_a_bad_setting_variable_is_refused_alike_naming_it(tmp_path, monkeypatch, var, value, args):
    result = invoke(tmp_path, monkeypatch, args, env={var: value})
    assert result.exit_code == 2 and f"environment variable {var}" in result.output, result.output
    assert no_folder(tmp_path)
