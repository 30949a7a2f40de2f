"""Run folder names: the suite's name made safe for a file name, and a fresh folder claimed."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ..errors import RunFolderError


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


NAME_PART_BYTES = 200   # a file name holds 255 bytes: room for the time stamp and a "-N" suffix


def folder_name_part(suite_name: str) -> str:
    """The suite name as it appears in run folder names: letters, digits, - _ . (at most 80
    characters and NAME_PART_BYTES bytes of UTF-8, cut between characters)."""
    part = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in suite_name)[:80]
    return part.encode("utf-8")[:NAME_PART_BYTES].decode("utf-8", "ignore")


def new_run_dir(base: Path, suite_name: str) -> Path:
    safe = folder_name_part(suite_name)
    stamp, n = utc_stamp(), 1
    try:
        Path(base).mkdir(parents=True, exist_ok=True)
        while True:
            path = Path(base) / (f"{stamp}-{safe}" if n == 1 else f"{stamp}-{safe}-{n}")
            try:
                path.mkdir()  # atomic claim: two runs started in the same second get different folders
                return path
            except FileExistsError:
                n += 1
    except OSError as exc:
        raise RunFolderError(f"cannot create a run folder under {base}: {exc.strerror or exc} "
                             f"(choose a folder with --out)") from None
