"""Secrets stay out (issue 21, item 6): allow-listed variables whose names look like credentials
never reach run.json or a report; both say which names were withheld."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo.machine import filtered_env, withheld_env

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"TORCH_HUB_TOKEN": "hf_s3cr3t", "COMMBENCH_API_TOKEN": "tok-s3cr3t", "CUDA_PASSWORD": "pw-s3cr3t",
           "NCCL_SECRET_KEY": "k-s3cr3t", "UCX_CREDENTIALS": "c-s3cr3t", "nccl_x_password": "lower-s3cr3t"}
PLAIN = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "HOME": "/root"}


def test_filtered_env_leaves_out_credential_names_and_lists_them():
    env = {**SECRETS, **PLAIN}
    kept = filtered_env(env)
    assert kept == {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO"}
    assert withheld_env(env) == sorted(k for k in SECRETS if k.startswith(("TORCH_", "COMMBENCH_", "CUDA_",
                                                                            "NCCL_", "UCX_")))


def test_run_json_withholds_credentials(tmp_path, monkeypatch):
    from commbench.launch.prepare import base_meta
    from commbench.suite import Suite

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    (tmp_path / "s.yaml").write_text("name: s\n")  # run.json records the suite file's hash
    meta = base_meta(Suite(name="s", path=tmp_path / "s.yaml"), "T0")
    text = json.dumps(meta)
    assert "s3cr3t" not in text
    assert meta["env"]["NCCL_ALGO"] == "Ring"
    assert {"TORCH_HUB_TOKEN", "COMMBENCH_API_TOKEN", "CUDA_PASSWORD"} <= set(meta["env_withheld"])


def test_a_report_withholds_credentials_even_from_an_old_run_json(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    meta = json.loads((run / "run.json").read_text())
    meta["env"] = {**meta.get("env", {}), "TORCH_HUB_TOKEN": "hf_s3cr3t", "NCCL_ALGO": "Ring"}
    meta["env_withheld"] = ["CUDA_PASSWORD"]
    (run / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["report", str(run)])
    assert result.exit_code == 0, result.output
    for name in ("report.html", "report.md"):
        text = (run / name).read_text()
        assert "s3cr3t" not in text and "NCCL_ALGO" in text
        assert "env withheld" in text and "TORCH_HUB_TOKEN" in text and "CUDA_PASSWORD" in text
