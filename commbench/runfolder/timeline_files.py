"""The writer and reader of what profiling stores beside the rows: timeline.csv and
traces/cases.jsonl (rank 0 appends through here; `trace` and the report read through here).

- ``timeline.csv``: case_id, rank, host, iteration, start_us, end_us, source, kernel_us: each
  rank's start and end of each timed iteration on rank 0's clock, relative to the Case's
  earliest start, and with ``--profile nccl`` the rank's kernel span of that iteration
  (docs/results.md).
- ``traces/cases.jsonl``: per Case, each rank's host, pid, clock offset and its error, and
  the Case's time origin ``t0_ns`` on rank 0's clock: what `commbench trace` needs to put
  every rank's records (NCCL plugin files are named by pid) on one timeline.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

TIMELINE_COLUMNS = ["case_id", "rank", "host", "iteration", "start_us", "end_us", "source", "kernel_us"]


def _drop_cut_line(path: Path) -> None:
    """A write cut by a crash or a full disk leaves a last line without its newline: drop that
    part line, so the next append starts a line of its own (the Case it belonged to reruns)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        fh.truncate(data.rfind(b"\n") + 1)


def append_timeline(run_dir: Path, rows: list[dict]) -> None:
    if not rows:
        return
    path = Path(run_dir) / "timeline.csv"
    _drop_cut_line(path)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=TIMELINE_COLUMNS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)
        fh.flush()
        os.fsync(fh.fileno())


def append_case_line(run_dir: Path, line: dict) -> None:
    path = Path(run_dir) / "traces" / "cases.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_cut_line(path)
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def load_timeline(run_dir: Path):
    import pandas as pd

    path = Path(run_dir) / "timeline.csv"
    if not path.exists():
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    df = pd.read_csv(path)
    df["case_id"] = df["case_id"].astype(str)
    return df


def load_case_lines(run_dir: Path) -> dict[str, dict]:
    """case_id -> its last line (a rerun replaces an earlier one)."""
    path = Path(run_dir) / "traces" / "cases.jsonl"
    out: dict[str, dict] = {}
    if path.exists():
        for raw in path.read_text(errors="replace").splitlines():
            try:
                d = json.loads(raw)
            except json.JSONDecodeError:
                continue
            out[str(d.get("case_id"))] = d
    return out
