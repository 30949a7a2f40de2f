"""The writer and reader of health.jsonl: the GPU health records of every launch (docs/results.md,
"health.jsonl"). Local rank 0 of each node appends a ``start`` record per GPU before the launch's
first Case, an ``event`` record per XID or ECC event as it arrives, and an ``end`` record per GPU
after the last Case; the analysis (report, accept) reads them back through ``load_health``.

Several nodes (and the launches of a wave) append to the one file, so every append holds the
folder's writers lock and writes whole lines in one write. The reader trusts nothing: a size cap,
UTF-8, each line a JSON object with the keys every record has (a RunFolderError names the file
and line otherwise); a last line without its line end (a node killed while it wrote) is left out
and ``warn`` is told.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..errors import RunFolderError, preview
from . import check, files
from .timeline_files import _drop_cut_line   # one definition of "a cut last line" for appended files
from .writers_lock import one_writer

HEALTH = "health.jsonl"
PHASES = ("start", "event", "end")
Warn = Callable[[str], None]


def append_health(run_dir: Path, records: list[dict]) -> None:
    """Append ``records`` as JSON lines, in one write under the folder's writers lock (the nodes of
    a launch and the launches of a wave share the file)."""
    if not records:
        return
    data = "".join(json.dumps(r, sort_keys=True, allow_nan=False) + "\n" for r in records).encode()
    with one_writer(run_dir, True):
        _drop_cut_line(run_dir, HEALTH)
        with files.storage(Path(run_dir) / HEALTH):
            files.append(run_dir, HEALTH, data)


def has_health(run_dir: Path) -> bool:
    return files.lstat(run_dir, HEALTH) is not None


def load_health(run_dir: Path, warn: Warn | None = None) -> list[dict]:
    """Every record of health.jsonl in file order (none when the run has no such file)."""
    path = Path(run_dir) / HEALTH
    if not has_health(run_dir):
        return []
    text = check.read_text(path)
    if text and not text.endswith("\n"):
        if warn is not None:
            warn(f"{path}:{text.count(chr(10)) + 1}: the last line has no line end (a node was stopped while it "
                 "wrote): that line is left out, the rest is used")
        text = text[:text.rfind("\n") + 1]
    out = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            out.append(_record(raw, f"{path}:{lineno}"))
    return out


def _record(raw: str, where: str) -> dict:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise RunFolderError(f"{where}: not a JSON line: health.jsonl is damaged or not commbench's") from None
    if not isinstance(rec, dict):
        raise RunFolderError(f"{where}: a health record is a JSON object, got {preview(rec)}")
    if rec.get("phase") not in PHASES:
        raise RunFolderError(f"{where}: 'phase' must be one of {', '.join(PHASES)}, got {preview(rec.get('phase'))}")
    if not isinstance(rec.get("host"), str) or not rec["host"]:
        raise RunFolderError(f"{where}: 'host' must be a host name, got {preview(rec.get('host'))}")
    for key in ("launch_id", "attempt"):
        if not (isinstance(rec.get(key), int) and not isinstance(rec.get(key), bool) and rec[key] >= 0):
            raise RunFolderError(f"{where}: {key!r} must be an integer >= 0, got {preview(rec.get(key))}")
    gpu = rec.get("gpu")
    if gpu is not None and not (isinstance(gpu, int) and not isinstance(gpu, bool) and gpu >= 0):
        raise RunFolderError(f"{where}: 'gpu' must be a GPU index or null, got {preview(gpu)}")
    if not isinstance(rec.get("t"), (int, float)) or isinstance(rec.get("t"), bool):
        raise RunFolderError(f"{where}: 't' must be a time in seconds, got {preview(rec.get('t'))}")
    return rec
