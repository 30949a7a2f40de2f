"""The GPU scripts of the training, MoE-layer and profiling checks, run on the CPU with stand-ins
for python3, mpirun and nvidia-smi: every part runs its own commands (no helper missing, no
other family's session started), every file they name exists, and each writes its summary."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "run_moe_layer.sh": ["build", "deepep", "tests", "np4", "ranks", "one"],
    "run_profile.sh": ["unit", "tests", "suite", "interf", "nsys", "inspector"],
    "run_training.sh": [],
}

STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$(basename "$0")" in
  nvidia-smi) [ "${1:-}" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" || echo "NVIDIA H200, 580" ;;
  python3) [ "${1:-}" = - ] && cat > /dev/null ;;
esac
exit 0
"""


@pytest.fixture()
def stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "mpirun", "nvidia-smi"):
        path = bin_dir / name
        path.write_text(STUB)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _run(script: str, parts: list[str], bin_dir: Path, tmp_path: Path):
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log),
           "OUT": str(tmp_path / "out"), "R": str(tmp_path / "runs")}
    res = subprocess.run(["bash", f"tests/gpu/{script}", *parts], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=60)
    calls = log.read_text() if log.exists() else ""
    return res, calls


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_part_runs_its_own_commands(script, stubs, tmp_path):
    res, calls = _run(script, SCRIPTS[script], stubs, tmp_path)
    assert "command not found" not in res.stderr, res.stderr
    summary = tmp_path / "out" / "summary.txt"
    text = res.stderr + (summary.read_text() if summary.exists() else "")
    assert "unknown part" not in text and "unknown group" not in text, text
    # none of them starts the whole GPU session (other families' tests and suites)
    for other in ("test_allreduce_gpu.py", "test_collectives_gpu.py", "test_nvshmem_gpu.py",
                  "suites/collectives.yaml", "nvshmem-small.yaml"):
        assert other not in calls, (other, calls)
    if script == "run_moe_layer.sh":
        assert "tests/gpu/test_moe_layer_gpu.py" in calls and "mpirun" in calls
        assert "commbench run tests/gpu/suites/moe-layer-ranks.yaml" in calls
        assert "commbench run suites/moe-layer.yaml" in calls
    if script == "run_profile.sh":
        assert "tests/gpu/test_profile_gpu.py" in calls
        assert "commbench run tests/gpu/suites/profile.yaml" in calls
        assert "commbench trace" in calls and "commbench run suites/interference.yaml" in calls
    if script == "run_training.sh":
        assert "tests/gpu/test_training_gpu.py" in calls and "commbench run suites/training.yaml" in calls


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_files_the_scripts_name_exist(script):
    text = (ROOT / "tests" / "gpu" / script).read_text()
    named = set(re.findall(r"(?<![\w/.$-])((?:tests|suites)/[\w./-]+\.(?:py|yaml|sh))", text))
    assert named, script
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing
    assert "source tests/gpu/session.sh" not in text   # sourcing it runs the whole session
