"""The kill switches hold against any suite (DESIGN section 7): a suite cannot set variables that
choose code, and a rank whose switches were changed after its launch set them refuses to measure."""
import json
import textwrap

import pytest
from click.testing import CliRunner

from commbench import safety
from commbench.cli import cli
from tests.conftest import needs_mpi
from tests.unit.sitecustomize_run import run_with_sitecustomize

SWITCHES = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@pytest.mark.parametrize("name", ["PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH",
                                  "NCCL_NET_PLUGIN", "NCCL_ENV_PLUGIN", "NCCL_CONF_FILE", "CUDA_HOME",
                                  "CUDA_INJECTION64_PATH", "COMMBENCH_NCCL_LIB", "COMMBENCH_KERNELS_DIR",
                                  "COMMBENCH_JIT_CACHE", "COMMBENCH_KILL_SWITCHES", "OMPI_MCA_plm_rsh_agent",
                                  "NVSHMEM_BOOTSTRAP_PLUGIN", "HOME"])
def test_suite_env_that_chooses_code_is_a_validate_error(tmp_path, name):
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent(f"""\
        name: s
        defaults: {{ranks: 2, sizes: [8B]}}
        benchmarks:
          - name: b
            family: collectives
            backends: [gloo]
            ops: [all_reduce]
            env: {{{name}: /tmp/x}}
        """))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert "s.yaml:8" in result.output and name in result.output


@pytest.mark.parametrize("name", ["NCCL_ALGO", "NCCL_PROTO", "NVSHMEM_REMOTE_TRANSPORT", "UCX_TLS",
                                  "OMPI_MCA_btl", "TORCH_NCCL_BLOCKING_WAIT", "CUDA_DEVICE_MAX_CONNECTIONS"])
def test_communication_stack_variables_are_allowed(name):
    assert safety.suite_env_refusal(name) is None


def test_tamper_detection():
    assert safety.switch_tamper(SWITCHES, None) is None
    assert safety.switch_tamper(SWITCHES, dict(SWITCHES)) is None
    less = {k: v for k, v in SWITCHES.items() if k != "NCCL_NVLS_ENABLE"}
    reason = safety.switch_tamper(less, SWITCHES)
    assert "NCCL_NVLS_ENABLE no longer set" in reason and "refusing to measure" in reason
    assert safety.expected_switches({safety.EXPECTED_VAR: json.dumps(SWITCHES)}) == SWITCHES


@needs_mpi
def test_a_rank_whose_switches_flip_at_start_refuses_to_measure(tmp_path):
    """A sitecustomize on the ranks' path (here from the starting environment) flips a switch: every
    Case becomes failed with the reason, nothing is measured, run.json records what the ranks saw."""
    rows, meta, console = run_with_sitecustomize(
        tmp_path,
        "import os, sys\n"
        "if 'commbench.rank' in ' '.join(sys.argv) or os.environ.get('OMPI_COMM_WORLD_RANK'):\n"
        "    os.environ['NCCL_NVLS_ENABLE'] = '1'\n",
        ["all_reduce", "broadcast"])
    assert len(rows) == 2, console
    for row in rows:
        assert row["status"] == "failed", row
        assert "kill switches changed inside the rank" in row["reason"]
        assert "NCCL_NVLS_ENABLE no longer set" in row["reason"]
    seen = meta["kill_switches_seen_by_ranks"]
    assert all("NCCL_NVLS_ENABLE" not in ranks[r] for ranks in seen.values() for r in ranks)
