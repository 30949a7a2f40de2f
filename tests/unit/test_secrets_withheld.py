"""Secrets stay out (issue 21, item 6): allow-listed variables whose names look like credentials
never reach run.json or a report; both say which names were withheld."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo.machine import filtered_env, withheld_env
from tests.conftest import needs_mpi

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


# -- issue 31, item 10: secrets by name pattern and by value shape ----------------------------------

TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"   # a token's shape under an innocent name
NAMED = {"NCCL_PASSPHRASE": "open sesame", "COMMBENCH_AUTH_BEARER": "b-s3cr3t", "COMMBENCH_PRIVATE": "p-s3cr3t",
         "OMPI_MCA_pwd": "pwd-s3cr3t", "NCCL_SESSION_COOKIE": "c-s3cr3t"}


def test_names_by_pattern_and_values_by_shape_are_withheld():
    env = {**NAMED, "NCCL_PLUGIN_ARG": TOKEN, "NCCL_ALGO": "Ring",
           "CUDA_VISIBLE_DEVICES": "GPU-2b604a07-c1a3-42ea-b4a9-e80dea62226e",
           "NCCL_TOPO_FILE": "/opt/nvidia/topologies/dgx-h100-topo.xml", "COMMBENCH_BYPASS_CACHE": "1"}
    kept = filtered_env(env)
    assert set(kept) == {"NCCL_ALGO", "CUDA_VISIBLE_DEVICES", "NCCL_TOPO_FILE", "COMMBENCH_BYPASS_CACHE"}
    assert withheld_env(env) == sorted([*NAMED, "NCCL_PLUGIN_ARG"])


def test_run_json_withholds_secrets_in_every_env_it_records(tmp_path, monkeypatch):
    from commbench.launch.prepare import base_meta
    from commbench.runfolder import RunFolder
    from commbench.suite import Suite

    for k, v in {**NAMED, "NCCL_PLUGIN_ARG": TOKEN}.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "s.yaml").write_text("name: s\n")
    meta = base_meta(Suite(name="s", path=tmp_path / "s.yaml"), "T0")
    meta["launches"] = [{"launch_id": 0, "env": {"COMMBENCH_SUITE_TOKEN": "t-s3cr3t", "NCCL_ALGO": "Tree"}}]
    (tmp_path / "run").mkdir()
    RunFolder(tmp_path / "run").write_meta(meta)
    text = (tmp_path / "run" / "run.json").read_text()
    assert "s3cr3t" not in text and "sesame" not in text and TOKEN not in text
    stored = json.loads(text)
    assert stored["launches"][0]["env"] == {"COMMBENCH_SUITE_TOKEN": "<withheld>", "NCCL_ALGO": "Tree"}
    assert {*NAMED, "NCCL_PLUGIN_ARG"} <= set(stored["env_withheld"])


def test_a_secret_suite_env_is_withheld_from_the_variant(tmp_path):
    from commbench.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbenchmarks:\n  - name: a\n    family: harness\n    ops: [barrier]\n    sizes: [8B]\n"
                 "    env: {COMMBENCH_SUITE_TOKEN: [t1-s3cr3t, t2-s3cr3t], NCCL_ALGO: Ring}\n"
                 "  - name: b\n    family: harness\n    ops: [barrier]\n    sizes: [8B]\n"
                 f"    env: {{NCCL_IB_LABEL: {TOKEN}}}\n")
    s = load_suite(p, gpu_count=0)
    variants = sorted({c.variant for c in s.cases})
    assert variants == ["COMMBENCH_SUITE_TOKEN=<withheld-1>", "COMMBENCH_SUITE_TOKEN=<withheld-2>",
                        "NCCL_IB_LABEL=<withheld>"]
    assert len({c.case_id for c in s.cases}) == 3


def test_a_report_withholds_secret_values_of_an_old_run_json_and_escapes_html_in_markdown(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    meta = json.loads((run / "run.json").read_text())
    meta["env"] = {**meta.get("env", {}), "NCCL_PASSPHRASE": "open sesame", "NCCL_PLUGIN_ARG": TOKEN,
                   "OMPI_MCA_pwd": "pwd-s3cr3t"}
    (run / "run.json").write_text(json.dumps(meta))
    text = (run / "results.csv").read_text().splitlines()
    header = text[0].split(",")
    i = header.index("variant")
    rows = [line.split(",") for line in text[1:]]
    for cells in rows:
        cells[i] = "<script>alert(1)</script>"
    (run / "results.csv").write_text("\n".join([text[0], *(",".join(c) for c in rows)]) + "\n")
    (run / "results.jsonl").unlink(missing_ok=True)
    result = CliRunner().invoke(cli, ["report", str(run)])
    assert result.exit_code == 0, result.output
    md = (run / "report.md").read_text()
    for name in ("report.html", "report.md"):
        page = (run / name).read_text()
        assert "sesame" not in page and TOKEN not in page and "pwd-s3cr3t" not in page
        assert "NCCL_PASSPHRASE" in page and "NCCL_PLUGIN_ARG" in page
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md


def test_an_imported_environment_withholds_secrets_in_run_json_and_the_kept_log(tmp_path):
    from commbench.analysis.import_nccl_tests import import_files

    doc = json.loads((ROOT / "tests" / "fixtures" / "nccl_tests" / "all_reduce_perf.json").read_text())
    doc["env"] += [f"{k}={v}" for k, v in NAMED.items()] + [f"NCCL_IB_LABEL={TOKEN}"]
    src = tmp_path / "all_reduce_perf.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "imp"
    import_files([src], out)
    for path in (out / "run.json", out / "logs" / "all_reduce_perf.json"):
        text = path.read_text()
        assert "s3cr3t" not in text and "sesame" not in text and TOKEN not in text, path
    meta = json.loads((out / "run.json").read_text())
    assert {*NAMED, "NCCL_IB_LABEL"} <= set(meta["env_withheld"]) and meta["env"]["NCCL_NVLS_ENABLE"] == "0"


def test_plan_json_withholds_secret_env_values_and_a_rank_restores_them(tmp_path):
    """plan.json (which the ranks read) never holds a secret value; a rank rebuilds the Case from
    its own environment, and a rank without the value refuses the Case by name."""
    from commbench.errors import CommbenchError
    from commbench.launch.plan_env import rebuilt_case
    from commbench.launch.prepare import write_plan
    from commbench.runfolder import RunFolder
    from commbench.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbenchmarks:\n  - name: a\n    family: harness\n    ops: [barrier]\n    sizes: [8B]\n"
                 f"    env: {{COMMBENCH_SUITE_TOKEN: t-s3cr3t, NCCL_IB_LABEL: {TOKEN}, NCCL_ALGO: Ring}}\n")
    suite = load_suite(p, gpu_count=0)
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    write_plan(folder, suite)
    text = (tmp_path / "run" / "plan.json").read_text()
    assert "s3cr3t" not in text and TOKEN not in text and "Ring" in text
    entry = json.loads(text)["cases"][0]
    real = {"COMMBENCH_SUITE_TOKEN": "t-s3cr3t", "NCCL_IB_LABEL": TOKEN}
    assert rebuilt_case(entry, real) == suite.cases[0]
    with pytest.raises(CommbenchError, match="COMMBENCH_SUITE_TOKEN"):
        rebuilt_case(entry, {**real, "COMMBENCH_SUITE_TOKEN": "other"})


@needs_mpi
def test_a_run_with_a_secret_suite_env_measures_and_stores_no_secret(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndefaults: {ranks: 2, warmup: 1, iters: 2, timeout_s: 60, sizes: [64B]}\n"
                     "benchmarks:\n  - name: a\n    family: collectives\n    backends: [gloo]\n"
                     "    ops: [all_reduce]\n    env: {COMMBENCH_SUITE_TOKEN: t-s3cr3t}\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["status"] == "ok" for r in rows), rows
    for name in ("plan.json", "run.json", "results.jsonl", "results.csv"):
        assert "s3cr3t" not in (out / name).read_text(), name
