"""The trace files beside a run's rows (docs/results.md), written and listed through files.py:

- ``traces/chrome/<case_id>.json``: a Case's ranks merged on one timeline (`commbench trace`);
- ``traces/torch/<case_id>-rank<r>.json``: torch.profiler's trace of one rank's timed batch;
- ``traces/nccl/``: the folder NCCL's profiler plugin (C, kernels/nccl_profiler/) writes its
  per-rank records into; only the folder is made here, the plugin writes its own files.

Names are validated and no link is followed; a whole file is written to a twin and renamed.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from . import files

CHROME = "traces/chrome"
TORCH = "traces/torch"
NCCL = "traces/nccl"


def chrome_rel(case_id: str) -> str:
    return f"{CHROME}/{files.safe_name(f'{case_id}.json')}"


def write_chrome(run_dir: Path, case_id: str, data: bytes) -> Path:
    """Replace RUN/traces/chrome/<case_id>.json with ``data``; OSError (full disk, read-only folder)
    and LinkRefused are left to the caller, no file left behind."""
    files.make_dirs(run_dir, CHROME)
    rel = chrome_rel(case_id)
    files.replace_whole(run_dir, rel, data)
    return Path(run_dir) / rel


def chrome_traces(run_dir: Path) -> list[str]:
    """Case ids with a merged Chrome trace in RUN/traces/chrome (links left out)."""
    return [name[:-len(".json")] for name in files.list_files(run_dir, CHROME, ".json")]


def torch_rel(case_id: str, rank: int) -> str:
    return f"{TORCH}/{files.safe_name(f'{case_id}-rank{rank}.json')}"


def write_torch(run_dir: Path, case_id: str, rank: int, export: Callable[[str], None]) -> str:
    """Have ``export(path)`` write a torch trace to a private temporary file (the profiler writes by
    path), then store it as RUN/traces/torch/<case_id>-rank<r>.json; the relative path is returned."""
    rel = torch_rel(case_id, rank)
    with tempfile.TemporaryDirectory(prefix="commbench-torch-") as tmp:
        staged = Path(tmp) / "trace.json"
        export(str(staged))
        data = staged.read_bytes()
    files.make_dirs(run_dir, TORCH)
    files.write_atomic(run_dir, rel, data)
    return rel


def nccl_dir(run_dir: Path) -> Path:
    """RUN/traces/nccl, made when missing (no link followed), for the plugin to write into."""
    files.make_dirs(run_dir, NCCL)
    return Path(run_dir) / NCCL
