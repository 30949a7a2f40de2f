"""The preflight on a real GPU machine: what NVML reads (count, card, memory) agrees with CUDA, and
an acceptance suite for more GPUs than the node has stops at once with the verdict (nothing
launched), while `run` records what it cannot hold as skipped rows."""
import csv
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo.nvml_devices import read_gpus
from tests.conftest import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]
ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3


def test_nvml_reads_what_cuda_sees():
    import torch

    seen = read_gpus()
    assert seen.problem == "" and seen.source in ("pynvml", "nvml"), seen
    assert seen.count == torch.cuda.device_count()
    for g in seen.gpus:
        props = torch.cuda.get_device_properties(g.index)
        assert g.name == props.name
        assert abs(g.total_bytes - props.total_memory) < 1 * GIB   # NVML counts the driver's reserve too
        assert 0 < g.free_bytes <= g.total_bytes


def test_preflight_answers_within_a_second():
    t0 = time.monotonic()
    read_gpus()
    assert time.monotonic() - t0 < 1.0


def _card() -> str:
    name = read_gpus().gpus[0].name
    return "h200" if "H200" in name else "h100"


def test_acceptance_for_more_gpus_than_the_node_has_fails_at_once(tmp_path):
    n = read_gpus().count
    if n >= 8:
        pytest.skip(f"this node has {n} GPUs: the 8-rank acceptance suite fits it")
    junit = tmp_path / "accept.xml"
    t0 = time.monotonic()
    res = CliRunner().invoke(cli, ["accept", str(ROOT / "suites" / f"acceptance-{_card()}.yaml"),
                                   "--junit", str(junit)])
    assert time.monotonic() - t0 < 30, "the preflight must stop before any launch"
    sentence = f"node has {n} GPU{'s' if n > 1 else ''}, the suite expects 8"
    assert res.exit_code == 1 and sentence in res.output, res.output
    root = ET.fromstring(junit.read_text().split("?>", 1)[1])
    assert sentence in [f.get("message") for f in root.findall(".//failure")]


def test_run_skips_a_launch_the_node_cannot_hold(tmp_path):
    n = read_gpus().count
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent(f"""\
        name: too-many-ranks
        benchmarks:
          - {{name: ar, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [4KiB],
             ranks: {n + 1}, warmup: 1, iters: 3}}
        """))
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 1, res.output   # nothing measured
    rows = list(csv.DictReader((tmp_path / "run" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["skipped"]
    assert f"needs {n + 1} GPUs on one node, this node has {n}" in rows[0]["reason"]
