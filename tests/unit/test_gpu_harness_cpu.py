"""The GPU tests' helpers and drivers measure on CPU stand-ins (CI has no GPU): a GPU harness that
cannot measure fails here, not on the GPU machine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("torch")


def _mpi(n: int, *args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    from commbench.launch.mpiexec import find_mpiexec

    env = {k: v for k, v in os.environ.items() if k != "COMMBENCH_KILL_SWITCHES"}   # as a bare shell
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    argv = [find_mpiexec(), "-n", str(n), "--oversubscribe", "--allow-run-as-root", sys.executable, *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@needs_mpi
def test_every_gpu_test_helper_measures_cpu_cases_through_the_runner(tmp_path):
    out = tmp_path / "rows.jsonl"
    proc = _mpi(2, str(ROOT / "tests" / "unit" / "gpu_standin.py"), str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["helper"] for r in rows} == {"test_moe_gpu.make_ctx+measure", "test_moe_layer_gpu.make_ctx",
                                           "test_proxy_gpu.ctx", "test_training_gpu.measure"}
    for row in rows:
        assert row.get("problems", []) == [], row
        if row.get("fault") == "stale":
            assert row["status"] == "wrong" and row["wrong"] > 0, row   # the stale schedule is caught
        else:
            assert row["status"] == "ok" and row["wrong"] == 0, row
        assert "ranks_per_gpu" not in row, row   # CPU Cases share no GPU


@needs_mpi
def test_the_allreduce_gpu_driver_measures_gloo_and_mpi(tmp_path):
    rows = tmp_path / "rows.jsonl"
    proc = _mpi(2, str(ROOT / "tests" / "gpu" / "test_allreduce_gpu.py"), "--rows", str(rows),
                "--family", "collectives", "--backends", "gloo", "mpi", "--sizes", "8B", "4KiB",
                "--dtypes", "float32")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(got) == 4
    assert all(r["status"] == "ok" and r["wrong"] == 0 for r in got), got
