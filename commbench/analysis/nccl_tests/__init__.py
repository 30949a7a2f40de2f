"""Reading nccl-tests output: the printed tables and the `-J` JSON file (docs/import.md)."""
from __future__ import annotations

from pathlib import Path

from .jsonfile import parse_json
from .records import Device, NcclTestsFormatError, ResultLine, Side, TestRun, half_unit, version_string
from .text import parse_text

__all__ = ["Device", "NcclTestsFormatError", "ResultLine", "Side", "TestRun", "half_unit", "parse_json",
           "parse_text", "read", "version_string"]


def read(path: Path) -> list[TestRun]:
    """Every nccl-tests invocation in ``path`` (a text log may hold several, one after another)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return [parse_json(path, text)]
    return parse_text(path, text)


