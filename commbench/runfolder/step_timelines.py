"""The classified step timelines beside a run's rows: ``timeline/<case_id>.r<rank>.json``, one per
Case and rank (docs/metrics.md, "Step timelines"), written by rank 0 and read by the report and
`commbench trace`.

A file is ``{"case_id", "rank", "source", "steps": [[start_us, end_us], ...], "intervals":
[{"kind", "stream", "start_us", "end_us", "name"[, "region"]}, ...]}``: times in microseconds from the
start of the first timed step on that rank's clock; ``source`` is ``cupti`` (the GPU's records)
or ``host`` (regions timed on the host); ``kind`` is ``comm``, ``copy`` or ``compute``;
``region`` (MoE layer rows) names the part and micro-batch whose host code launched the record
("dispatch.0").
Readers check the shape and refuse what does not hold it (RunFolderError naming the file).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import RunFolderError
from . import files

FOLDER = "timeline"
KINDS = ("comm", "copy", "compute")
MAX_BYTES = 64 << 20


def rel(case_id: str, rank: int) -> str:
    return f"{FOLDER}/{files.safe_name(f'{case_id}.r{int(rank)}.json')}"


def write(run_dir: Path, case_id: str, rank: int, source: str, steps: list, intervals: list[dict]) -> str:
    """Store one rank's timeline of a Case; the path relative to the run folder is returned."""
    doc = {"case_id": case_id, "rank": int(rank), "source": source,
           "steps": [[round(float(s), 3), round(float(e), 3)] for s, e in steps],
           "intervals": [{"kind": iv["kind"], "stream": iv.get("stream"),
                          "start_us": round(float(iv["start_us"]), 3), "end_us": round(float(iv["end_us"]), 3),
                          "name": str(iv.get("name", "")),
                          **({"region": str(iv["region"])} if iv.get("region") else {})}
                         for iv in intervals]}
    files.make_dirs(run_dir, FOLDER)
    path = rel(case_id, rank)
    files.write_atomic(run_dir, path, json.dumps(doc, separators=(",", ":")).encode())
    return path


def ranks_of(run_dir: Path, case_id: str) -> list[int]:
    """The ranks with a stored timeline for a Case."""
    prefix = f"{case_id}.r"
    out = []
    for name in files.list_files(run_dir, FOLDER, ".json"):
        tail = name[len(prefix):-len(".json")] if name.startswith(prefix) else ""
        if tail.isdigit():
            out.append(int(tail))
    return sorted(out)


def read(run_dir: Path, case_id: str, rank: int) -> dict:
    """One rank's timeline of a Case, its shape checked (FileNotFoundError when there is none)."""
    path = rel(case_id, rank)
    where = Path(run_dir, path)
    try:
        doc = json.loads(files.read_bytes(run_dir, path, cap=MAX_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{where}: not a timeline JSON file ({exc})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("steps"), list) and isinstance(doc.get("intervals"), list)):
        raise RunFolderError(f"{where}: a timeline needs 'steps' and 'intervals' lists")
    for i, step in enumerate(doc["steps"]):
        if not (isinstance(step, list) and len(step) == 2 and all(_finite(v) for v in step)):
            raise RunFolderError(f"{where}: step {i} is not [start_us, end_us]")
        if step[1] < step[0]:
            raise RunFolderError(f"{where}: step {i} ends ({step[1]:g} us) before it starts ({step[0]:g} us)")
    for i, iv in enumerate(doc["intervals"]):
        if not (isinstance(iv, dict) and iv.get("kind") in KINDS and _finite(iv.get("start_us"))
                and _finite(iv.get("end_us")) and iv["end_us"] >= iv["start_us"]):
            raise RunFolderError(f"{where}: interval {i} needs kind in {KINDS} and start_us <= end_us")
    return doc


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
