"""NVTX ranges: nothing without a tool; with one (a recorder loaded the way Nsight Systems'
injection library is), one range per Case and per timed batch in domain "commbench"."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.profile import nvtx

ROOT = Path(__file__).resolve().parents[2]
RECORDER = ROOT / "tests" / "unit" / "native" / "nvtx_recorder.cc"

CASE = ("from commbench.families.base import Case\n"
        "case = Case(suite='s', bench='b', family='collectives', op='all_reduce', backend='nccl', variant='default',"
        " env=(), dtype='float32', size_bytes=1 << 20, params=(), warmup=1, iters=5, timing='auto', ranks=2,"
        " ranks_per_node=2, timeout_s=60.0)\n")


def test_without_a_tool_ranges_cost_nothing(monkeypatch):
    monkeypatch.delenv(nvtx.TOOL_ENV, raising=False)
    monkeypatch.delenv(nvtx.FORCE_ENV, raising=False)
    nvtx.ranges.cache_clear()
    try:
        assert nvtx.ranges() is None
        t0 = time.perf_counter()
        for _ in range(10000):
            with nvtx.nvtx_range("x", 1):
                pass
        assert (time.perf_counter() - t0) / 10000 < 20e-6   # per range, far below any Case
    finally:
        nvtx.ranges.cache_clear()


@pytest.mark.skipif(not nvtx.cuda_include_dirs(), reason="no CUDA toolkit headers (nvtx3/) here")
def test_a_tool_sees_case_and_batch_ranges_in_the_commbench_domain(tmp_path):
    lib = tmp_path / "librecorder.so"
    subprocess.run(["g++", "-std=c++17", "-fPIC", "-shared", f"-I{nvtx.cuda_include_dirs()[0]}", str(RECORDER),
                    "-o", str(lib)], check=True)
    log = tmp_path / "nvtx.log"
    code = CASE + ("from commbench.profile import nvtx\n"
                   "assert nvtx.ranges().how == 'domain'\n"
                   "with nvtx.case_range(case):\n"
                   "    with nvtx.batch_range(case, 5):\n"
                   "        pass\n")
    env = {**os.environ, nvtx.TOOL_ENV: str(lib), "NVTX_RECORDER_LOG": str(log), "PYTHONPATH": str(ROOT),
           "COMMBENCH_JIT_CACHE": str(tmp_path / "jit")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "create commbench"
    assert lines[1].startswith("push commbench | s/b all_reduce nccl 1MiB case_id=") and lines[1].endswith(
        " | 1048576")
    assert lines[2].startswith("push commbench | timed x5 s/b all_reduce nccl 1MiB")
    assert lines[3:] == ["pop commbench", "pop commbench"]
