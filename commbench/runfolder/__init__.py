"""Run folders (docs/results.md): the column schema (``schema``), the writer (``writer``: rows,
samples, run.json) and the one reader (``reader``: pandas frames for summaries, report, compare
and accept). Importing this package does not import pandas; ``reader`` does."""
from __future__ import annotations

from .schema import COLUMNS, NUMERIC, SAMPLE_COLUMNS, SCHEMA_VERSION, STATUSES, case_row, placement_columns
from .writer import RunFolder, RunFolderError, RunFolderExists, new_run_dir, read_meta, utc_stamp

__all__ = ["COLUMNS", "NUMERIC", "SAMPLE_COLUMNS", "SCHEMA_VERSION", "STATUSES", "RunFolder",
           "RunFolderError", "RunFolderExists", "case_row", "new_run_dir", "placement_columns", "read_meta",
           "utc_stamp"]
