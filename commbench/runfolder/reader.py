"""The one reader of stored run folders (results.csv, samples.csv, run.json), used by `run`'s
summary and plots, report, compare and accept alike, so every reader sees the same values:
numeric columns are numbers (an empty cell is NaN), text columns are strings ("" when empty),
an empty ``wrong`` is 0, and samples carry SAMPLE_COLUMNS. A folder whose run.json has a newer
``schema_version`` than this reader's is refused (RunFolderError), and so is a samples.csv that
holds one (case, rank, iteration) key twice (check.DuplicateKeys, naming the keys)."""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import check
from .check import DuplicateKeys
from .schema import LEGACY_PARAM_COLUMNS, NUMERIC, PASS_COLUMN, SAMPLE_COLUMNS, TEXT
from .lock import writer_holding
from .writer import RunFolderError, is_run_folder, read_meta

__all__ = ["DuplicateKeys", "Run", "RunFolderError", "is_run_folder", "iteration_times", "load", "load_run",
           "load_samples", "param_columns", "read_meta"]


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

    @property
    def param_columns(self) -> list[str]:
        return param_columns(self.meta, self.results.columns)


def param_columns(meta: dict, columns) -> list[str]:
    """The run's parameter columns its rows hold: run.json's ``param_columns`` (every family's
    Params, recorded at run time), or for a folder written before run.json had that key,
    LEGACY_PARAM_COLUMNS (the parameters of that time), in either case those among ``columns``."""
    recorded = meta.get("param_columns")
    names = ([n for family in recorded.values() for n in family] if isinstance(recorded, dict)
             else LEGACY_PARAM_COLUMNS)
    present = set(columns)
    return [n for n in dict.fromkeys(names) if n in present]


def _read_csv(path: Path, required: tuple[str, ...]):
    """(frame, line of each row) of a CSV that passed check.scan_csv (shape, UTF-8, size)."""
    text = check.read_text(path)
    lines = check.scan_csv(path, text, required)
    try:
        # keep_default_na=False so an empty reason stays "", not NaN; numbers are coerced below
        frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=["", "nan", "NaN"])
    except (ValueError, pd.errors.ParserError) as exc:
        raise RunFolderError(f"cannot read {path}: {str(exc)[:200]}") from None
    if len(frame) != len(lines):   # the two parsers disagree: do not guess which row is which
        raise RunFolderError(f"cannot read {path}: {len(frame)} rows parsed where {len(lines)} lines hold data")
    return frame, lines


def load(path) -> pd.DataFrame:
    """The rows of a run folder (results.csv; columns: docs/results.md)."""
    path = Path(path)
    _require_folder(path)
    read_meta(path)   # refuses a folder of a newer schema_version before reading its rows
    return _rows(path)


def _require_folder(path: Path) -> None:
    if not is_run_folder(path):
        raise RunFolderError(
            f"{path} is not a run folder: expected a directory holding results.csv "
            "(as written by `commbench run`, see docs/results.md).")
    _require_idle(path)


def _require_idle(path: Path) -> None:
    """A folder a live run still writes is half written: refused (its own run reads it freely)."""
    holder = writer_holding(path)
    if holder is not None:
        raise RunFolderError(f"{path}: a run is still writing this folder ({holder}): its rows and samples "
                             f"are not complete; wait for the run to end, then read it")


def _rows(path: Path) -> pd.DataFrame:
    results, lines = _read_csv(path / "results.csv", check.RESULT_REQUIRED)
    check.check_results(path / "results.csv", results, lines, NUMERIC)
    check.check_against_jsonl(path, results)
    for col in NUMERIC:
        if col in results.columns:
            results[col] = pd.to_numeric(results[col], errors="coerce")
    for col in TEXT:
        if col in results.columns:
            results[col] = results[col].astype(object).where(results[col].notna(), "").astype(str)
    if "wrong" in results.columns:
        results["wrong"] = results["wrong"].fillna(0)
    if "case_id" in results.columns:
        results["case_id"] = results["case_id"].astype(str)
    return results


def load_samples(path) -> pd.DataFrame:
    """Per-rank, per-iteration times (samples.csv); an empty frame when the run has none."""
    samples_path = Path(path) / "samples.csv"
    _require_idle(Path(path))
    if not os.path.lexists(samples_path):
        return pd.DataFrame(columns=list(SAMPLE_COLUMNS))
    samples, lines = _read_csv(samples_path, tuple(SAMPLE_COLUMNS))
    check.check_samples(samples_path, samples, lines)
    samples["time_us"] = pd.to_numeric(samples["time_us"], errors="coerce")
    if PASS_COLUMN in samples.columns:   # a burn-in's: empty while the pass runs (docs/results.md)
        samples[PASS_COLUMN] = pd.to_numeric(samples[PASS_COLUMN], errors="coerce")
    samples["case_id"] = samples["case_id"].astype(str)
    samples["host"] = samples["host"].astype(str)
    return samples


def load_run(path) -> Run:
    """Load a run folder; raise RunFolderError with a readable message if it is not one."""
    path = Path(path)
    _require_folder(path)
    meta = read_meta(path)   # first: a newer schema_version is refused before anything is read
    return Run(path=path, results=_rows(path), samples=load_samples(path), meta=meta)


def iteration_times(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (case_id, iteration): the slowest rank's time, as the runner reduces it (DESIGN 5). In
    a burn-in folder each Case's samples of its last pass only (those of the row results.csv
    holds; an unstamped sample belongs to the pass after the last stamped one)."""
    if samples.empty:
        return pd.DataFrame(columns=["case_id", "iteration", "time_us"])
    if PASS_COLUMN in samples.columns:
        order = pd.to_numeric(samples[PASS_COLUMN], errors="coerce").fillna(float("inf"))
        samples = samples[order == order.groupby(samples["case_id"]).transform("max")]
    return samples.groupby(["case_id", "iteration"], as_index=False)["time_us"].max()
