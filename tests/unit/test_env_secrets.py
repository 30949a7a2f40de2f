"""Secrets known by their shape (sysinfo/secrets.py): a value shaped like a credential is withheld
whatever its variable is called, in run.json, plan.json, the variant column, the command line
and the reports; a site adds its own names and value patterns; benign values stay recorded."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo.machine import filtered_env, is_secret, redact_env, withheld_env
from commbench.sysinfo.secrets import looks_secret

ROOT = Path(__file__).resolve().parents[2]
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjb21tYmVuY2gifQ."
       "qK4pR2vT9xW1yZ3bC5dF7gH9jL1mN3pQ5rS7tV9wX1y")
# the probe's cases (issue 44): each value's tell is in its shape, not its variable's name
SHAPED = {"COMMBENCH_JWT_NOTE": JWT, "NCCL_X_ID": "AKIA" + "Q7W3E5R7T9Y1U3I5",
          "NCCL_NOTE": "Authorization: Basic dXNlcjpodW50ZXIy", "UCX_URL": "https://user:hunter2@example.com/x",
          "CUDA_SHORTPW": "hunter2"}
BENIGN = {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "^lo,docker0",
          "CUDA_VISIBLE_DEVICES": "GPU-2b604a07-c1a3-42ea-b4a9-e80dea62226e,MIG-GPU-2b604a07-c1a3-42ea-b4a9-"
                                  "e80dea62226e/1/0",
          "NCCL_TOPO_FILE": "/opt/nvidia/topologies/dgx-h100-topo.xml", "NCCL_COMM_ID": "10.1.2.3:12345",
          "UCX_TLS": "rc,cuda_copy,cuda_ipc", "TORCH_CUDA_ARCH_LIST": "9.0;10.0", "NCCL_NOTE2": "basic settings",
          "COMMBENCH_RUN_DIR": "results/20250101T120000Z-acceptance-h100", "NCCL_BUFFSIZE": "4194304"}


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_the_probe_cases_are_withheld(name):
    env = {name: SHAPED[name], **BENIGN}
    assert name not in filtered_env(env) and withheld_env(env) == [name]


@pytest.mark.parametrize("value", [
    "Bearer abcdefghij0123456789", "token ghp_16C7e42F292c6912E7710c838347Ae178B4a", "glpat-abcdefghij0123456789",
    "xoxb-1234567890-abcdefghij", "sk-proj0123456789abcdefghij", "hf_abcdefghijklmnopqrstuvwxyz0123456789",
    "AIza" + "B" * 35, "ASIA" + "ABCDEFGH23456789", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=",
    "s3://bucket/x?X-Amz-Signature=0a1b2c", "--api_key=abc123", "password: hunter2",
    "mongodb://admin:pa55@db:27017/x", "--opt zQ3xV8kL2pW9mN4bR7tY1cF6"])
def test_credential_shapes_anywhere_in_a_value_are_withheld(value):
    assert looks_secret(value), value
    assert redact_env({"NCCL_PLUGIN_ARGS": value}) == {"NCCL_PLUGIN_ARGS": "<withheld>"}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_paths_numbers_names_and_device_lists_are_kept(name):
    assert filtered_env({name: BENIGN[name]}) == {name: BENIGN[name]}


@pytest.mark.parametrize("name", ["CUDA_SHORTPW", "NCCL_PW", "nccl_admin_pwd", "UCX_CREDS", "TORCH_JWT"])
def test_credential_words_at_either_end_of_a_name_are_withheld(name):
    assert is_secret(name, "x")


def test_a_site_adds_names_and_value_patterns(monkeypatch):
    env = {"NCCL_SITE_LABEL": "blue", "UCX_TENANT": "tenant=acme-42", "NCCL_ALGO": "Ring"}
    assert set(filtered_env(env)) == set(env)
    monkeypatch.setenv("COMMBENCH_WITHHOLD_NAMES", "nccl_site_*, OTHER")
    monkeypatch.setenv("COMMBENCH_WITHHOLD_PATTERNS", r"tenant=\w+")
    assert filtered_env(env) == {"NCCL_ALGO": "Ring"}
    assert withheld_env({**env, "COMMBENCH_WITHHOLD_PATTERNS": r"tenant=\w+"}) == [
        "COMMBENCH_WITHHOLD_PATTERNS", "NCCL_SITE_LABEL", "UCX_TENANT"]


@pytest.mark.parametrize("var, value", [("COMMBENCH_WITHHOLD_PATTERNS", "tenant=(\\w+"),
                                        ("COMMBENCH_WITHHOLD_NAMES", "NCCL_$(x)")])
def test_an_unusable_site_setting_is_refused_before_a_folder_exists(tmp_path, monkeypatch, var, value):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(var, value)
    suite = ROOT / "suites" / "quickstart.yaml"
    for args in (["validate", str(suite)], ["run", str(suite), "--dry-run"],
                 ["run", str(suite), "--out", str(tmp_path / "out")]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and var in result.output, (args, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()


def test_run_json_and_its_command_line_hold_no_shaped_secret(tmp_path, monkeypatch):
    from commbench.launch.prepare import base_meta
    from commbench.runfolder import RunFolder
    from commbench.suite import Suite

    for k, v in SHAPED.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("sys.argv", ["commbench", "run", "s.yaml", "--set", f"env={{UCX_URL: '{SHAPED['UCX_URL']}'}}"])
    (tmp_path / "s.yaml").write_text("name: s\n")
    meta = base_meta(Suite(name="s", path=tmp_path / "s.yaml"), "T0")
    meta["launches"] = [{"launch_id": 0, "env": {"NCCL_NOTE": SHAPED["NCCL_NOTE"], "NCCL_ALGO": "Tree"}}]
    (tmp_path / "run").mkdir()
    RunFolder(tmp_path / "run").write_meta(meta)
    text = (tmp_path / "run" / "run.json").read_text()
    for value in SHAPED.values():
        assert value not in text and value[:12] not in text
    stored = json.loads(text)
    assert stored["launches"][0]["env"] == {"NCCL_NOTE": "<withheld>", "NCCL_ALGO": "Tree"}
    assert stored["command"][:4] == ["commbench", "run", "s.yaml", "--set"] and stored["command"][4] == "<withheld>"
    assert set(SHAPED) <= set(stored["env_withheld"])


def test_reports_withhold_shaped_values_of_an_old_run_json(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    meta = json.loads((run / "run.json").read_text())
    meta["env"] = {**meta.get("env", {}), **SHAPED, "NCCL_ALGO": "Ring"}
    (run / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["report", str(run)])
    assert result.exit_code == 0, result.output
    for name in ("report.html", "report.md"):
        page = (run / name).read_text()
        for value in SHAPED.values():
            assert value not in page and value.split()[-1] not in page, (name, value)
        assert "NCCL_ALGO" in page and "COMMBENCH_JWT_NOTE" in page and "UCX_URL" in page


def test_a_suite_env_value_shaped_like_a_credential_is_withheld_from_the_variant(tmp_path):
    from commbench.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbenchmarks:\n  - name: a\n    family: harness\n    ops: [barrier]\n    sizes: [8B]\n"
                 f"    env: {{UCX_URL: '{SHAPED['UCX_URL']}', NCCL_ALGO: [Ring, Tree]}}\n")
    variants = sorted({c.variant for c in load_suite(p, gpu_count=0).cases})
    assert variants == ["NCCL_ALGO=Ring", "NCCL_ALGO=Tree"]
    p.write_text(p.read_text().replace("NCCL_ALGO: [Ring, Tree]", "NCCL_ALGO: Ring"))
    assert {c.variant for c in load_suite(p, gpu_count=0).cases} == {"UCX_URL=<withheld>,NCCL_ALGO=Ring"}
