"""The sbatch templates, unchanged, on a real single-node Slurm (Debian's slurm-wlm: munge,
slurmctld and slurmd on this host, see local_slurm.py), with the CPU quickstart.

Only the site-specific `#SBATCH` lines are overridden on the sbatch command line, as
slurm/README.md tells a user to: one node, two tasks (the quickstart's ranks), no GPUs.
The site's MpiDefault is `none`, Debian's default. The packages come from `make slurm-deps`
(.ci/run calls it); without them these tests skip and say why."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from commbench.runfolder.reader import load
from tests.conftest import has_mpiexec
from tests.slurm.local_slurm import LocalSlurm, missing

REPO = Path(__file__).resolve().parents[2]
WHY = missing() or (None if has_mpiexec() else "no mpiexec/mpi4py on this machine")
pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

SITE = ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0"]   # this host's shape
QUICK = "--set sizes=[8B]"          # the quickstart's 19 Cases at one size, to keep CI short
QUICK_CASES = 19


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalSlurm(tmp_path_factory.mktemp("slurm")) as slurm:
        yield slurm


@pytest.fixture(scope="module")
def cluster_without_pmix(tmp_path_factory):
    """A Slurm whose srun offers no PMIx (as Debian's, whose mpi_pmix cannot load its library):
    srun cannot start Open MPI 5's ranks there."""
    with LocalSlurm(tmp_path_factory.mktemp("slurm-nopmix"), without_plugins=("mpi_pmix",)) as slurm:
        yield slurm


def _commbench(tmp: Path) -> Path:
    """The command the templates run: this checkout's commbench on this Python."""
    cmd = tmp / "commbench"
    cmd.write_text(f"#!/bin/sh\nexec {sys.executable} -m commbench \"$@\"\n")
    cmd.chmod(0o755)
    return cmd


def submit(slurm: LocalSlurm, tmp: Path, template: str, **env) -> tuple[int, dict, str, Path]:
    """sbatch --wait the template; (exit status, job record, job log, run folder)."""
    out = tmp / "run"
    env = {"PYTHONPATH": str(REPO), "COMMBENCH": str(_commbench(tmp)), "SUITE": "suites/quickstart.yaml",
           "RUN_ARGS": QUICK, "OUT": str(out), **env}
    rc, job_id, job = slurm.sbatch_wait([*SITE, f"--output={tmp}/job-%j.out", f"slurm/{template}.sbatch"],
                                        env=env, cwd=REPO, timeout_s=900)
    log_path = tmp / f"job-{job_id}.out"
    log = log_path.read_text() if log_path.exists() else f"no job log; {job}\n{slurm.logs()}"
    return rc, job, log, out


def _all_ok(out: Path, n: int = QUICK_CASES) -> None:
    df = load(out)
    assert len(df) == n and set(df["status"]) == {"ok"}, df[["op", "backend", "status", "reason"]]
    assert set(df["world_size"]) == {2} and (df["wrong"] == 0).all()


@pytest.mark.parametrize("template, run_args, cases", [("single-node", "", 152), ("multi-node", QUICK, QUICK_CASES)])
def test_each_template_runs_the_quickstart_in_ranks_mode(cluster, tmp_path, template, run_args, cases):
    rc, job, log, out = submit(cluster, tmp_path, template, RUN_ARGS=run_args)
    assert rc == 0 and job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log
    _all_ok(out, cases)                 # the whole quickstart once, one size otherwise
    # srun got the plugin this MPI speaks, or (no working one here) commbench started the ranks
    assert "commbench: srun --mpi: pmix" in log or "running in orchestrate mode" in log, log
    assert log.count(f"commbench: {cases} ok, 0 skipped") == 1, log      # one summary, from rank 0


def test_orchestrate_mode_starts_its_own_launches(cluster, tmp_path):
    rc, job, log, out = submit(cluster, tmp_path, "single-node", MODE="orchestrate")
    assert rc == 0 and job["JobState"] == "COMPLETED", log
    _all_ok(out)
    launches = sorted((out / "logs").glob("launch-*.log"))
    first = launches[0].read_text()
    # commbench's own launch: srun with the allocation's --cpus-per-task and a --mpi, or mpiexec
    assert ("srun --ntasks=2" in first and "--cpus-per-task=8" in first and "--mpi=" in first) \
        or "mpiexec" in first, first


def test_a_slurm_without_a_pmi_for_this_mpi_still_runs(cluster_without_pmix, tmp_path):
    rc, job, log, out = submit(cluster_without_pmix, tmp_path, "multi-node")
    assert rc == 0 and job["JobState"] == "COMPLETED", log
    assert "running in orchestrate mode" in log and "no srun MPI plugin starts" in log, log
    _all_ok(out)
    assert "mpiexec" in (out / "logs" / "launch-0.log").read_text()


def test_the_job_fails_with_commbench_when_a_case_fails(cluster, tmp_path):
    rc, job, log, out = submit(cluster, tmp_path, "single-node", SUITE="tests/slurm/fail-one.yaml", RUN_ARGS="")
    assert rc == 1 and job["JobState"] == "FAILED" and job["ExitCode"] == "1:0", log
    df = load(out).set_index("bench")
    assert df.loc["ok", "status"] == "ok" and df.loc["boom", "status"] == "failed"
    assert "1 ok, 0 skipped, 0 wrong, 1 failed, 0 timeout" in log


def test_a_pmi_mismatch_stops_at_start_with_one_message(cluster, tmp_path):
    # srun --mpi=none: every task is its own world of 1
    rc, job, log, out = submit(cluster, tmp_path, "single-node", SRUN_MPI="none")
    assert rc == 2 and job["JobState"] == "FAILED" and job["ExitCode"] == "2:0", log
    assert log.count("srun started 2 tasks, but each sees an MPI world of 1") == 1, log
    assert "srun --mpi=pmix" in log and "already exists" not in log
    assert not (out / "results.csv").exists()
