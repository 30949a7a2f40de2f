"""`pip install -e .` (no torch, no MPI) is enough for report, compare and accept; `run`
names the extra it lacks and exits 2.

The first tests hide torch and mpi4py from a child Python (fast, in CI); the `install` test builds
a fresh virtual environment without system packages and pip-installs the project into it, as a
laptop user would (slow: .ci/run runs it)."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "tests" / "fixtures" / "runs"
HIDDEN = ("torch", "mpi4py", "scipy")

BLOCK = f"""
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HIDDEN!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)")
        return None
sys.meta_path.insert(0, _Absent())
from commbench.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="commbench")
finally:
    assert not any(m.split(".")[0] in {HIDDEN!r} for m in sys.modules), "imported a hidden package"
"""


def _without_extras(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-c", BLOCK, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300, check=False)


def _analysis_commands(run_cmd, tmp_path: Path) -> None:
    """report, compare, accept on the fixture runs, with the exit statuses of the README."""
    res = run_cmd("report", RUNS / "cpu-base", RUNS / "cpu-rerun", "--out", tmp_path / "r.html")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000 and (tmp_path / "r.md").exists()
    res = run_cmd("compare", RUNS / "cpu-base", RUNS / "cpu-rerun", "--fail-above", "10")
    assert res.returncode == 0 and "PASS" in res.stdout, res.stdout + res.stderr
    res = run_cmd("compare", RUNS / "cpu-base", RUNS / "cpu-slow2x", "--fail-above", "10")
    assert res.returncode == 1 and "failing points (84)" in res.stdout, res.stdout + res.stderr
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: all_reduce latency, select: {op: all_reduce}, metric: time_us,\n"
                     "     aggregate: max, op: '<=', value: LIMIT}\n")
    text = rules.read_text()
    rules.write_text(text.replace("LIMIT", "1000000"))
    res = run_cmd("accept", RUNS / "cpu-base", "--rules", rules, "--out", tmp_path / "a.html")
    assert res.returncode == 0 and "PASS" in res.stdout, res.stdout + res.stderr
    rules.write_text(text.replace("LIMIT", "1"))
    res = run_cmd("accept", RUNS / "cpu-base", "--rules", rules, "--out", tmp_path / "a.html")
    assert res.returncode == 1 and "FAIL" in res.stdout, res.stdout + res.stderr
    res = run_cmd("accept", RUNS / "cpu-base", "--rules", tmp_path / "missing.yaml")
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_report_compare_accept_without_torch_or_mpi(tmp_path):
    _analysis_commands(lambda *a: _without_extras(*a, cwd=tmp_path), tmp_path)


def test_run_names_the_missing_extra(tmp_path):
    res = _without_extras("run", REPO / "suites" / "quickstart.yaml", "--out", tmp_path / "r", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "pip install -e '.[mpi]'" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.install
def test_a_fresh_venv_without_torch_runs_the_analysis_commands(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO)], capture_output=True, text=True,
                         timeout=1800, check=False)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout.lower()
    assert "torch==" not in listed and "mpi4py==" not in listed and "scipy==" not in listed
    exe = env_dir / "bin" / "commbench"

    def run_cmd(*args):
        return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, cwd=tmp_path,
                              timeout=300, check=False, env={**os.environ, "MPLBACKEND": "Agg",
                                                             "PYTHONPATH": ""})
    _analysis_commands(run_cmd, tmp_path)
    res = run_cmd("run", REPO / "suites" / "quickstart.yaml")
    assert res.returncode == 2 and "pip install -e '.[mpi]'" in res.stderr, res.stdout + res.stderr
