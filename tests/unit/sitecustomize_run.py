"""Run a small 2-rank MPI suite with a sitecustomize on the ranks' Python path (the way a site's or
a library's start-up code would tamper with a rank), the kill switches set as a site sets them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SWITCHES = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def run_with_sitecustomize(tmp_path: Path, site_code: str, ops: list[str]) -> tuple[list[dict], dict, str]:
    """`commbench run` of one mpi-backend collectives benchmark (2 ranks, 64 B) with ``site_code`` as
    sitecustomize.py; (the rows of results.jsonl, run.json, the console output)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(site_code)
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent(f"""\
        name: s
        defaults: {{ranks: 2, warmup: 1, iters: 2, sizes: [64B], timeout_s: 60}}
        benchmarks:
          - {{name: b, family: collectives, backends: [mpi], ops: [{", ".join(ops)}]}}
        """))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", ""),
                                                        os.getcwd()]), **SWITCHES}
    proc = subprocess.run([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=180)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return rows, json.loads((out / "run.json").read_text()), proc.stdout + proc.stderr
