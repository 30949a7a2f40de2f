"""`sbatch slurm/multi-node.sbatch` on a Slurm cluster of the namespace nodes (slurm-cluster.sh):
slurmctld on the login host, one slurmd per node; rows, placements and the job's exit status."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.cluster.testbed import HERE, ROOT

pytestmark = pytest.mark.cluster

SLURM = HERE / "slurm-cluster.sh"


@pytest.fixture(scope="module")
def slurm(cluster):
    env = {**os.environ, **cluster._env()}
    up = subprocess.run(["bash", str(SLURM), "up"], env=env, capture_output=True, text=True, timeout=120)
    if up.returncode == 3:
        pytest.skip(f"Slurm test bed unavailable: {up.stderr.strip()}")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield cluster
    finally:
        subprocess.run(["bash", str(SLURM), "down"], env=env, capture_output=True, text=True, timeout=120)


def _mpi_default(cluster) -> str:
    conf = (Path(cluster.state) / "slurm" / "slurm.conf").read_text()
    return re.search(r"^MpiDefault=(\S+)", conf, re.M).group(1)


def _sbatch(cluster, tmp_path: Path, suite: Path, mode: str) -> tuple[int, Path, str]:
    """Submit the unmodified template for 4 nodes x 1 task, wait, return (job exit, run folder, job log)."""
    out, log = tmp_path / "run", tmp_path / "job.out"
    own = Path(sys.executable).parent / "commbench"
    env = ["env", f"SUITE={suite}", f"OUT={out}", f"MODE={mode}",
           f"PATH={Path(sys.executable).parent}:{os.environ.get('PATH', '')}"]
    if own.exists() and not (ROOT / ".venv" / "bin" / "commbench").exists():
        env.append(f"COMMBENCH={own}")
    res = cluster.run([*env, "sbatch", "--wait", "--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=1",
                       "--gpus-per-node=0", "--time=10", f"--output={log}", "slurm/multi-node.sbatch"],
                      timeout=660)
    text = log.read_text() if log.exists() else ""
    return res.returncode, out, res.stdout + res.stderr + text


def test_ranks_mode_runs_the_cpu_suite_across_four_nodes(slurm, tmp_path):
    rc, out, log = _sbatch(slurm, tmp_path, HERE / "suites" / "quickstart-4nodes.yaml", "ranks")
    assert rc == 0, log[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 28 and (df.status == "ok").all(), df[["op", "status", "reason"]]
    assert (df.num_nodes == 4).all() and (df.world_size == 4).all()
    assert sorted(pd.read_csv(out / "samples.csv").host.unique()) == slurm.nodes
    # the template's plain `srun --label commbench info` (no --mpi) ran on every node
    assert sorted(set(re.findall(r"^\d+: +host +(\S+)", log, re.M))) == slurm.nodes, log[-3000:]


def test_orchestrate_mode_places_nodes_and_pairs_with_srun(slurm, tmp_path):
    rc, out, log = _sbatch(slurm, tmp_path, HERE / "suites" / "pairs-4nodes.yaml", "orchestrate")
    assert rc == 0, log[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert (df.status == "ok").all(), df[["hosts", "status", "reason"]]
    samples = pd.read_csv(out / "samples.csv")
    where = samples.groupby("case_id").host.agg(lambda h: ",".join(sorted(set(h))))
    assert (where[df.case_id].values == df.hosts.values).all()  # every launch ran where it says
    assert sorted(df[df.bench == "node"].host) == slurm.nodes and df[df.bench == "pair"].hosts.nunique() == 6
    launcher = (out / "logs" / "launch-0.log").read_text()
    if _mpi_default(slurm) == "pmix" and not _pmix_mismatch():
        assert "--nodelist=" in launcher  # srun, not mpiexec
    else:  # no PMIx library for Slurm (libpmix-dev), or one of another major version than the
        # MPI's own: commbench starts the ranks with mpiexec inside the allocation (launch/srun.py)
        assert "mpiexec" in launcher.split("\n", 2)[1], launcher[:500]


def _pmix_mismatch() -> str:
    """launch/srun.py's verdict on this machine's Slurm PMIx plugins (their file names) and MPI."""
    from commbench.launch.srun import mpi_pmix_version, pmix_mismatch

    offered = [p.stem[len("mpi_"):] for p in Path("/usr/lib").glob("*/slurm-wlm/mpi_*.so")]
    return pmix_mismatch(offered, mpi_pmix_version())


def test_a_failed_case_fails_the_job(slurm, tmp_path):
    suite = tmp_path / "crash.yaml"
    suite.write_text(textwrap.dedent("""\
        name: crash
        defaults: {ranks: 4, ranks_per_node: 1, warmup: 1, iters: 3, sizes: [8B], timeout_s: 60}
        benchmarks:
          - {name: before, family: harness, ops: [barrier]}
          - {name: crash, family: harness, ops: [crash]}
          - {name: after, family: harness, ops: [barrier]}
        """))
    rc, out, log = _sbatch(slurm, tmp_path, suite, "orchestrate")
    assert rc == 1, log[-3000:]
    status = pd.read_csv(out / "results.csv").set_index("bench").status
    assert status.to_dict() == {"before": "ok", "crash": "failed", "after": "ok"}
