"""Assemble the run report from run folders: every registered section (sections/) that applies
to the rows, in its order."""
from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd

from ...errors import CommbenchError, RunFolderError
from ...runfolder import files
from ...runfolder.reader import Run
from .document import Document
from .sections import ReportInput, all_sections


class ReportWriteError(CommbenchError):
    """A report file could not be written (full disk, read-only folder): named, nothing cut left."""

    exit_code = 1   # not bad input


def combined(runs: list[Run]) -> pd.DataFrame:
    """All runs' rows in one frame with a 'run' column (folder name) for overlays."""
    frames = []
    for run in runs:
        df = run.results.copy()
        df.insert(0, "run", run.label)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def report_input(runs: list[Run], out_dir: Path | None = None) -> ReportInput:
    """The sections' input; each run named so that the runs differ (two repeat sets in one report
    are set-a/repeat-1 and set-b/repeat-1, two lines each, not one merged line)."""
    from ..runsets import labelled

    runs = labelled(list(runs))
    df = combined(runs)
    if len(runs) <= 1 and "run" in df.columns:
        df = df.drop(columns=["run"])  # one run: no need to name it on every line
    params = list(dict.fromkeys(c for run in runs for c in run.param_columns))
    return ReportInput(runs=runs, rows=df, rehearsal=_rehearsal_note(df), param_columns=params,
                       out_dir=out_dir)


def build_report(runs: list[Run], out_dir: Path | None = None) -> Document:
    """The report of ``runs``; ``out_dir``, the folder it will be written to, makes links to files
    beside the runs (traces) relative to it."""
    report = report_input(runs, out_dir)
    doc = Document("commbench report: " + ", ".join(r.label for r in report.runs))
    for section in all_sections():
        if section.applies_to(report):
            section.add(doc, report)
    return doc


def _rehearsal_note(df: pd.DataFrame) -> str:
    """A sentence when rows ran with several ranks on one GPU (their times are not speed)."""
    from .. import rehearsal

    shared = rehearsal.shared_mask(df)
    if not shared.any():
        return ""
    most = int(pd.to_numeric(df.loc[shared, rehearsal.COLUMN], errors="coerce").max())
    return (f"{int(shared.sum())} of {len(df)} points ran with up to {most} ranks on one GPU. They prove "
            f"the results (wrong column) and the multi-rank code paths; their times and bandwidths are the "
            f"GPU time-sliced between processes and say nothing about speed (docs/rehearsal.md).")


def write_report(run_dirs, out=None):
    """Load run folders and write the HTML report and its Markdown twin; return both paths.

    Default out: RUN/report.html for one run. ``commbench run`` calls this at the end (analysis.finish).
    """
    from ...runfolder.reader import load_run

    runs = [load_run(d) for d in run_dirs]
    html_path = Path(out) if out is not None else runs[0].path / "report.html"
    return write_document(build_report(runs), html_path, html_path.with_suffix(".md"))


def write_document(doc: Document, html_path: Path, md_path: Path) -> tuple[Path, Path]:
    """The HTML report and its Markdown twin (images in '<stem>_files/'), each written under a
    temporary name beside it and renamed into place: a full or read-only disk leaves the previous
    file (or none), never a cut one, and names the file (ReportWriteError, exit 1)."""
    from . import html, markdown

    html_path, md_path = Path(html_path), Path(md_path)
    _replace(html_path, html.render(doc).encode("utf-8"))
    image_dir = None
    if doc.images():
        folder = md_path.parent / f"{md_path.stem}_files"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportWriteError(f"cannot create {folder}: {exc.strerror or exc}") from None
        for im in doc.images():
            _replace(folder / im.name, im.png)
        image_dir = folder.name
    _replace(md_path, markdown.render(doc, image_dir).encode("utf-8"))
    return html_path, md_path


def _replace(path: Path, data: bytes) -> None:
    """``path`` replaced as a whole by the run folder's writer (a twin renamed over it)."""
    try:
        files.replace_whole(path.parent, path.name, data)
    except RunFolderError as exc:   # a name no file may have
        raise ReportWriteError(f"{exc}; nothing was written") from None
    except OSError as exc:
        full = " (the disk or quota is full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise ReportWriteError(f"cannot write {path}: {exc.strerror or exc}{full}; no cut file was left "
                               f"there") from None
