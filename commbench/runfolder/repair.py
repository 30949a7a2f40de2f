"""What `--resume` repairs in a run folder before it measures anything (RunFolder.repair): lines
that are not UTF-8 (a reader refuses a whole file for one), cut sample lines, and which Cases
still have samples (a measured Case without them is measured again)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from . import files


def drop_undecodable_lines(folder: Path, name: str) -> bool:
    """FOLDER/NAME rewritten without its lines that are not UTF-8; True when any was dropped."""
    data = files.read_bytes(folder, name)
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        pass
    kept = []
    for line in data.splitlines(keepends=True):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            continue
        kept.append(line)
    files.write_atomic(folder, name, b"".join(kept))
    return True


def kept_samples(data: bytes, case_ids: set[str] | None, pass_index: int | None = None) -> tuple[bytes, int]:
    """samples.csv's bytes keeping only complete UTF-8 lines of the header's width (of ``case_ids``
    when given, or stamped with an ended burn-in pass in column ``pass_index``), and how many lines
    were dropped. Every line of a Case with a line that is not UTF-8 goes: a Case keeps all its
    samples or none."""
    if not data:
        return data, 0
    lines, damaged = [], set()
    for raw in data.splitlines(keepends=True):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(None)
            damaged.add(next(csv.reader([raw.decode("utf-8", "replace")]), [""])[0])
    header = lines[0] if lines[0] is not None else data.splitlines()[0].decode("utf-8", "replace")
    kept = [header if header.endswith("\n") else header + "\n"]
    width = len(next(csv.reader([header]), []))   # the header's columns (extras included)
    for line in lines[1:]:
        if line is None:
            continue
        cells = next(csv.reader([line]), [])
        if (line.endswith("\n") and len(cells) == width and cells[0] not in damaged
                and (case_ids is None or cells[0] in case_ids or (pass_index is not None and cells[pass_index]))):
            kept.append(line)
    return "".join(kept).encode(), len(lines) - len(kept)


def sampled_case_ids(folder: Path) -> set[str]:
    """The Cases samples.csv holds at least one sample of (none when it is gone)."""
    try:
        text = files.read_bytes(folder, "samples.csv").decode("utf-8", "replace")
    except FileNotFoundError:
        return set()
    return {cells[0] for cells in csv.reader(io.StringIO(text, newline="")) if cells}
