"""Localisation on live timings: 4 MPI ranks act as 4 "nodes", one is throttled on purpose.

Each rank times a real host copy per iteration (host clock, as the CPU
backends do); the rank playing node2 sleeps an injected delay inside its
timed region, as a node with a slow link or a throttled GPU would. The
samples go through the same samples.csv -> slow_from_samples path as a run
folder, and exactly node2 must be named.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.accept.localize import slow_from_samples
from commbench.analysis.accept.rules import LocalizeSettings

SLOW_NODE = "node2"
WORKER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    host = f"node{rank}"
    delay_s = float(sys.argv[2]) if host == sys.argv[1] else 0.0
    rows = []
    for case, size in enumerate((1 << 16, 1 << 20)):
        src = np.arange(size // 4, dtype=np.float32) + 1.0
        dst = np.empty_like(src)
        for it in range(12):
            comm.Barrier()
            t0 = time.perf_counter()
            np.copyto(dst, src)
            if delay_s:
                time.sleep(delay_s)
            rows.append((f"case{case}", rank, host, "cpu", it, (time.perf_counter() - t0) * 1e6))
        assert float(dst[-1]) == size // 4  # the copy really happened
    everything = comm.gather(rows, root=0)
    if rank == 0:
        with open(sys.argv[3], "w") as fh:
            fh.write("case_id,rank,host,gpu,iteration,time_us\\n")
            for part in everything:
                for r in part:
                    fh.write(",".join(map(str, r)) + "\\n")
""")


def _mpiexec() -> str | None:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


@pytest.mark.mpi   # its own mpiexec: starts real ranks
@pytest.mark.skipif(_mpiexec() is None, reason="no mpiexec: Open MPI is not installed here")
def test_injected_slow_node_is_named(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is needed to start the ranks")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "samples.csv"
    argv = [_mpiexec(), "-n", "4", "--oversubscribe"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += [sys.executable, str(script), SLOW_NODE, "0.02", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    samples = pd.read_csv(out)
    found = slow_from_samples(samples, settings=LocalizeSettings(min_excess_pct=50, min_share=0.75))
    hosts = found[(found["level"] == "host") & found["flagged"]]
    assert list(hosts["name"]) == [SLOW_NODE], found.to_string()
