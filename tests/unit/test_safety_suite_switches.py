"""Attempts to get past the multicast kill switches through a suite (issue 21, item 1): every one
must fail, either as a validate error with the line or as a skipped Case; and what ranks see is
what the launch set."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench import safety
from commbench.launch.prepare import record_unsupported
from commbench.runfolder import RunFolder
from commbench.suite import load_suite, parse_overrides

SWITCHES = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
HEAD = "name: s\n"
BENCH = "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2"

REFUSED = {
    "plain": HEAD + "benchmarks:\n" + BENCH + ", env: {LD_PRELOAD: /tmp/x.so}}\n",
    "in defaults": HEAD + "defaults: {env: {PYTHONPATH: /tmp/x}}\nbenchmarks:\n" + BENCH + "}\n",
    "anchor and alias": HEAD + "description: &e {PYTHONSTARTUP: /tmp/x.py}\nbenchmarks:\n" + BENCH + ", env: *e}\n",
    "merge key": (HEAD + "benchmarks:\n  - name: b\n    family: collectives\n    backends: [mpi]\n"
                  "    env:\n      <<: {LD_PRELOAD: /tmp/x.so}\n      NCCL_ALGO: Ring\n"),
    "merge into defaults": (HEAD + "description: &base {env: {LD_LIBRARY_PATH: /tmp}}\n"
                            "defaults: {<<: *base, ranks: 2}\nbenchmarks:\n" + BENCH + "}\n"),
    "lower case": HEAD + "benchmarks:\n" + BENCH + ", env: {ld_preload: /tmp/x.so}}\n",
    "lower-case prefix": HEAD + "benchmarks:\n" + BENCH + ", env: {nccl_net_plugin: x}}\n",
    "mixed-case plugin": HEAD + "benchmarks:\n" + BENCH + ", env: {NCCL_Net_Plugin: x}}\n",
    "mpi env list": HEAD + "benchmarks:\n" + BENCH + ", env: {OMPI_MCA_mca_base_env_list: 'LD_PRELOAD=/x'}}\n",
    "ssh args": HEAD + "benchmarks:\n" + BENCH + ", env: {OMPI_MCA_plm_rsh_args: '-oProxyCommand=x'}}\n",
    "fork agent": HEAD + "benchmarks:\n" + BENCH + ", env: {OMPI_MCA_orte_fork_agent: /tmp/x}}\n",
    "expected switches": HEAD + "benchmarks:\n" + BENCH + ", env: {COMMBENCH_KILL_SWITCHES: '{}'}}\n",
    "env list variant": HEAD + "benchmarks:\n" + BENCH + ", env: {LD_PRELOAD: [a.so, b.so]}}\n",
    "newline in name": HEAD + "benchmarks:\n" + BENCH + ', env: {"NCCL_ALGO\\nLD_PRELOAD": x}}\n',
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_suite_cannot_set_code_loading_variables(tmp_path, name):
    path = tmp_path / "s.yaml"
    path.write_text(REFUSED[name])
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "s.yaml:" in result.output and "Traceback" not in result.output
    assert ("invalid suite (1 problem(s))" in result.output
            and any(why in result.output for why in ("chooses code", "not a communication-stack variable",
                                                     "not a valid environment variable name"))), result.output


@pytest.mark.parametrize("item", ["env={LD_PRELOAD: /tmp/x.so}", "env={PYTHONPATH: /tmp}",
                                  "env={OMPI_MCA_mca_base_env_list: 'NCCL_NVLS_ENABLE=1'}",
                                  "env.LD_PRELOAD=/tmp/x.so", "ENV={LD_PRELOAD: x}"])
def test_set_cannot_set_them_either(tmp_path, item):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "benchmarks:\n" + BENCH + "}\n")
    result = CliRunner().invoke(cli, ["validate", str(path), "--set", item])
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize("how", ["suite", "set", "defaults", "merge"])
def test_flipping_a_set_switch_is_a_skipped_case(tmp_path, monkeypatch, how):
    for k, v in SWITCHES.items():
        monkeypatch.setenv(k, v)
    env = "{NCCL_NVLS_ENABLE: '1', NVSHMEM_DISABLE_NVLS: '0', TORCH_SYMM_MEM_DISABLE_MULTICAST: 'false'}"
    text = {"suite": HEAD + "benchmarks:\n" + BENCH + f", env: {env}}}\n",
            "set": HEAD + "benchmarks:\n" + BENCH + "}\n",
            "defaults": HEAD + f"defaults: {{env: {env}}}\nbenchmarks:\n" + BENCH + "}\n",
            "merge": HEAD + f"description: &e {env}\nbenchmarks:\n" + BENCH + ", env: {<<: *e}}\n"}[how]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    overrides = parse_overrides([f"env={env}"]) if how == "set" else None
    suite = load_suite(path, gpu_count=0, overrides=overrides)
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    skipped = record_unsupported(folder, suite, set())
    assert skipped == {c.case_id for c in suite.cases}
    rows = folder.latest_rows()
    assert all(r["status"] == "skipped" and "kill switch" in r["reason"] for r in rows)
    # and were a Case launched anyway, its ranks would get the site's values
    child = safety.launch_env(tmp_path, dict(suite.cases[0].env), allow_multicast=True)
    assert {k: child[k] for k in SWITCHES} == SWITCHES
    assert json.loads(child[safety.EXPECTED_VAR]) == SWITCHES


def test_a_rank_whose_launch_said_nothing_refuses(monkeypatch):
    """A rank that lost the launch's record of the switches cannot vouch for them."""
    from commbench import runner

    class OneRank:
        size, rank = 1, 0

        def allgather(self, obj):
            return [obj]

    for key in safety.KILL_SWITCHES:   # an earlier test may have set them (os.environ and the C env)
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv(safety.EXPECTED_VAR, raising=False)
    assert "refusing to measure" in runner._tampered(OneRank(), {})
    monkeypatch.setenv(safety.EXPECTED_VAR, json.dumps({}))
    assert runner._tampered(OneRank(), {}) is None
