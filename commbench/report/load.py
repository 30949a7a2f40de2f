"""Read stored run folders (results.csv, samples.csv, run.json) for report, compare, accept."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from commbench.errors import CommbenchError

NUMERIC = ("size_bytes", "count", "world_size", "num_nodes", "ranks_per_node", "warmup", "iters",
           "time_us", "time_us_min", "time_us_p90", "time_us_max", "algbw_gbps", "busbw_gbps",
           "wrong")
SAMPLE_COLUMNS = ("case_id", "rank", "host", "gpu", "iteration", "time_us")


class RunFolderError(CommbenchError):
    """A path is not a readable run folder (no results.csv, unreadable CSV or JSON)."""


@dataclass
class Run:
    """One stored run: its rows, per-rank samples (may be empty) and metadata."""

    path: Path
    results: pd.DataFrame
    samples: pd.DataFrame
    meta: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.path.name


def is_run_folder(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "results.csv").is_file()


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        # keep_default_na=False so an empty reason stays "", not NaN; numbers are coerced below
        return pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"])
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise RunFolderError(f"cannot read {path}: {exc}") from exc


def load_run(path) -> Run:
    """Load a run folder; raise RunFolderError with a readable message if it is not one."""
    path = Path(path)
    if not is_run_folder(path):
        raise RunFolderError(
            f"{path} is not a run folder: expected a directory holding results.csv "
            "(as written by `commbench run`, see docs/results.md).")
    results = _read_csv(path / "results.csv")
    for col in NUMERIC:
        if col in results.columns:
            results[col] = pd.to_numeric(results[col], errors="coerce")
    for col in ("status", "reason", "op", "backend", "variant", "dtype", "family"):
        if col in results.columns:
            results[col] = results[col].astype(object).where(results[col].notna(), "").astype(str)
    if "wrong" in results.columns:
        results["wrong"] = results["wrong"].fillna(0)
    samples_path = path / "samples.csv"
    if samples_path.is_file():
        samples = _read_csv(samples_path)
        missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
        if missing:
            raise RunFolderError(f"{samples_path} lacks columns {missing} (docs/results.md)")
        samples["time_us"] = pd.to_numeric(samples["time_us"], errors="coerce")
        samples["case_id"] = samples["case_id"].astype(str)
        samples["host"] = samples["host"].astype(str)
    else:
        samples = pd.DataFrame(columns=list(SAMPLE_COLUMNS))
    if "case_id" in results.columns:
        results["case_id"] = results["case_id"].astype(str)
    meta: dict = {}
    meta_path = path / "run.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunFolderError(f"cannot read {meta_path}: {exc}") from exc
    return Run(path=path, results=results, samples=samples, meta=meta)


def iteration_times(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (case_id, iteration): the slowest rank's time, as the runner reduces it (DESIGN 5)."""
    if samples.empty:
        return pd.DataFrame(columns=["case_id", "iteration", "time_us"])
    return samples.groupby(["case_id", "iteration"], as_index=False)["time_us"].max()
