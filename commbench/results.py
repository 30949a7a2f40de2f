"""Run folders (docs/results.md): rows, samples, metadata, storage and pandas loading.

Rows are appended to ``results.jsonl`` (flushed and fsynced as each Case ends)
and ``results.csv`` is rewritten from it atomically, so the CSV always holds
every row measured so far, whatever extra columns families add.
"""
from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timezone
from pathlib import Path

SCHEMA_VERSION = 1

COLUMNS = ["suite", "bench", "case_id", "family", "op", "backend", "variant", "dtype",
           "size_bytes", "count", "world_size", "num_nodes", "ranks_per_node", "in_place",
           "warmup", "iters", "timing", "time_us", "time_us_min", "time_us_p90", "time_us_max",
           "algbw_gbps", "busbw_gbps", "wrong", "status", "reason", "log"]
SAMPLE_COLUMNS = ["case_id", "rank", "host", "gpu", "iteration", "time_us"]
STATUSES = ("ok", "wrong", "skipped", "failed", "timeout")


class RunFolderExists(FileExistsError):
    pass


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_run_dir(base: Path, suite_name: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in suite_name)
    Path(base).mkdir(parents=True, exist_ok=True)
    stamp, n = utc_stamp(), 1
    while True:
        path = Path(base) / (f"{stamp}-{safe}" if n == 1 else f"{stamp}-{safe}-{n}")
        try:
            path.mkdir()  # atomic claim: two runs started in the same second get different folders
            return path
        except FileExistsError:
            n += 1


class RunFolder:
    """Writer for one run folder. Only rank 0 (or the parent process) writes."""

    def __init__(self, path: Path):
        self.path = Path(path)

    # -- creation --
    def create(self, *, resume: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderExists(f"{self.path} exists and is not a folder: choose another --out")
        if self.path.exists() and any(self.path.iterdir()) and not resume:
            raise RunFolderExists(
                f"{self.path} already exists and holds results: pass --resume to continue it, "
                f"or choose another --out")
        (self.path / "logs").mkdir(parents=True, exist_ok=True)

    # -- rows --
    def append_row(self, row: dict) -> None:
        with open(self.path / "results.jsonl", "a") as fh:
            fh.write(json.dumps(row, default=_jsonable) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.rewrite_csv()

    def rows(self) -> list[dict]:
        p = self.path / "results.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash mid-write; the Case reruns on --resume
        return out

    def latest_rows(self) -> list[dict]:
        """One row per Case: the last one written (a --resume rerun supersedes a failed/timeout row)."""
        latest: dict[str, dict] = {}
        for r in self.rows():
            latest.pop(r.get("case_id"), None)  # keep the rerun's position (run order)
            latest[r.get("case_id")] = r
        return list(latest.values())

    def rewrite_csv(self) -> None:
        rows = self.latest_rows()
        extra = []
        for r in rows:
            for k in r:
                if k not in COLUMNS and k not in extra:
                    extra.append(k)
        tmp = self.path / ".results.csv.tmp"
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS + extra, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS + extra})
        os.replace(tmp, self.path / "results.csv")

    def done_case_ids(self) -> set[str]:
        """Cases with a final row (any status but a timeout/failure of the whole launch are final)."""
        return {r["case_id"] for r in self.latest_rows() if r.get("status") in ("ok", "wrong", "skipped")}

    # -- samples --
    def append_samples(self, samples: list[dict]) -> None:
        p = self.path / "samples.csv"
        new = not p.exists()
        with open(p, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=SAMPLE_COLUMNS)
            if new:
                w.writeheader()
            w.writerows(samples)
            fh.flush()
            os.fsync(fh.fileno())

    # -- metadata --
    def write_meta(self, meta: dict) -> None:
        tmp = self.path / ".run.json.tmp"
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, default=_jsonable))
        os.replace(tmp, self.path / "run.json")

    def read_meta(self) -> dict:
        p = self.path / "run.json"
        return json.loads(p.read_text()) if p.exists() else {}


def placement_columns(case) -> dict:
    """Row columns of a placed Case: `hosts` (comma-joined), and `host` when it ran on one host."""
    if not case.hosts:
        return {}
    return {"hosts": ",".join(case.hosts), **({"host": case.hosts[0]} if len(case.hosts) == 1 else {})}


def case_row(case, *, world_size: int, num_nodes: int | None, ranks_per_node: int, log: str,
             status: str = "ok", reason: str = "") -> dict:
    """A result row for ``case`` with every column of docs/results.md (measurements still empty)."""
    return {
        "suite": case.suite, "bench": case.bench, "case_id": case.case_id, "family": case.family,
        "op": case.op, "backend": case.backend, "variant": case.variant, "dtype": case.dtype,
        "size_bytes": case.size_bytes, "count": None, "world_size": world_size,
        "num_nodes": num_nodes, "ranks_per_node": ranks_per_node,
        "in_place": case.param("in_place"), "warmup": case.warmup, "iters": case.iters,
        "timing": case.timing, "time_us": None, "time_us_min": None, "time_us_p90": None,
        "time_us_max": None, "algbw_gbps": None, "busbw_gbps": None, "wrong": None,
        "status": status, "reason": reason, "log": log,
        **placement_columns(case), **{k: v for k, v in case.params if k != "in_place"},
    }


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def load(run_dir) -> "pandas.DataFrame":  # noqa: F821
    """All rows of a run folder as a DataFrame (columns: docs/results.md)."""
    import pandas as pd

    run_dir = Path(run_dir)
    if not (run_dir / "results.csv").exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no results.csv)")
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    if "reason" in df:
        df["reason"] = ["" if pd.isna(x) else str(x) for x in df["reason"]]
    return df


def load_samples(run_dir) -> "pandas.DataFrame":  # noqa: F821
    import pandas as pd

    p = Path(run_dir) / "samples.csv"
    return pd.read_csv(p) if p.exists() else pd.DataFrame(columns=SAMPLE_COLUMNS)


def load_meta(run_dir) -> dict:
    return RunFolder(Path(run_dir)).read_meta()
