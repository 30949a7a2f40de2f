"""Sizes and durations with units: parse '64KiB' -> 65536, format 65536 -> '64KiB'; '8h' -> 28800 s."""
from __future__ import annotations

import re

from .errors import preview

_UNITS = {
    "": 1, "B": 1,
    "K": 1024, "KB": 1000, "KIB": 1024,
    "M": 1024**2, "MB": 1000**2, "MIB": 1024**2,
    "G": 1024**3, "GB": 1000**3, "GIB": 1024**3,
    "T": 1024**4, "TB": 1000**4, "TIB": 1024**4,
}
# At most 15 digits before and 6 after the point: every size that fits a machine, and a float
# converts it exactly (a longer string would overflow or round).
_SIZE_RE = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,6})?)\s*([A-Za-z]{0,3})\s*$")


def parse_size(value) -> int:
    """Return a size in bytes from an int or a string such as '8B', '64KiB', '1GiB'.

    Bare 'K', 'M', 'G' are binary (as in nccl-tests' -b/-e); 'KB', 'MB', 'GB' are decimal.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as '64KiB', got {preview(value)}")
    if isinstance(value, int):
        if value < 0 or value >= 1 << 63:
            raise ValueError(f"size must be >= 0 and below 2**63 bytes, got {preview(value)}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a size such as '64KiB', got {preview(value)}")
    m = _SIZE_RE.match(value)
    if m and m.group(2).endswith("b") and m.group(2).upper() in _UNITS:   # 8b, 64kb, 1Mb: bits
        raise ValueError(f"size {preview(value, 40)}: a lower-case b means bits, and sizes are bytes: "
                         f"write {m.group(1)}{m.group(2)[:-1]}B (B, KiB, MiB, GiB; or KB, MB, GB)")
    if not m or m.group(2).upper() not in _UNITS:
        shown = repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
        raise ValueError(f"bad size {shown}: use a number (at most 15 digits) with B, KiB, MiB, GiB "
                         f"(or KB, MB, GB)")
    num = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if num != int(num):
        raise ValueError(f"size {value!r} is not a whole number of bytes")
    return int(num)


def format_size(num_bytes: int) -> str:
    """Shortest exact binary-unit label: 1024 -> '1KiB', 1536 -> '1536B'."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= factor and num_bytes % factor == 0:
            return f"{num_bytes // factor}{unit}"
    return f"{num_bytes}B"


_DURATION_UNITS = {"ms": 1e-3, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,6})?)\s*(ms|min|[smhd]?)\s*$")


def parse_duration(value, *, allow_zero: bool = False) -> float:
    """Seconds from a duration such as '8h', '30m', '90s', '1.5h', '500ms' or a bare number of
    seconds. Zero is refused unless ``allow_zero`` (a cost may be nothing; a time limit may not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration such as '8h', '30m' or '90s', got {preview(value)}")
    m = _DURATION_RE.match(str(value).lower())
    if not m:
        raise ValueError(f"bad duration {preview(value)}: use a number with ms, s, m, h or d (8h, 30m, 90s)")
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]
    if seconds == 0 and not allow_zero:
        raise ValueError(f"a duration must be above 0 s, got {preview(value)}")
    return seconds
