"""Stored rows of one collective -> nccl-tests' printed per-size table (the layout of
nccl-tests' common.cu: size, count, type, redop, root, then time, algbw, busbw, #wrong out of
place and in place), so a user of nccl-tests reads commbench's numbers where they expect them.

A side that was not measured (no in-place form, a skipped or failed Case) shows N/A in each of
its four columns; the reasons follow the table as comment lines."""
from __future__ import annotations

import math

from ...comm.ops import OPS, ROOT
from ...units import format_size

# nccl-tests' names of the element types commbench measures
TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "int32": "int32"}

# nccl-tests' columns: width and the two header lines; a data line puts two spaces between columns
WIDTHS = (12, 12, 8, 6, 6) + (7, 6, 6, 6) * 2
NAMES = ("size", "count", "type", "redop", "root") + ("time", "algbw", "busbw", "#wrong") * 2
UNITS = ("(B)", "(elements)", "", "", "") + ("(us)", "(GB/s)", "(GB/s)", "") * 2


def _header_line(cells) -> str:
    return "#" + f"{cells[0]:>{WIDTHS[0] - 1}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells[1:], WIDTHS[1:]))


HEADER = "\n".join(["#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
                     _header_line(NAMES), _header_line(UNITS)])


def fit(value: float, width: int) -> str:
    """A number in at most ``width`` characters: 2 decimals, fewer when it is wide, then
    exponent form (nccl-tests' getFloatStr)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'N/A':>{width}}"
    for digits in (2, 1, 0):
        text = f"{value:{width}.{digits}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.0e}"


def _num(row: dict, key: str) -> float | None:
    value = row.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _side(row: dict | None) -> str:
    if row is None or row.get("status") not in ("ok", "wrong"):
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = _num(row, "wrong")
    return (f"  {fit(_num(row, 'time_us'), 7)}  {fit(_num(row, 'algbw_gbps'), 6)}  "
            f"{fit(_num(row, 'busbw_gbps'), 6)}  {'N/A' if wrong is None else str(int(wrong)):>6}")


def _in_place(row: dict) -> bool:
    return str(row.get("in_place")).lower() in ("true", "1")


def per_size(rows: list[dict]) -> list[tuple[int, dict | None, dict | None]]:
    """(size_bytes, out-of-place row, in-place row) per size, smallest first."""
    sizes: dict[int, list] = {}
    for row in rows:
        size = int(_num(row, "size_bytes") or 0)
        pair = sizes.setdefault(size, [None, None])
        pair[1 if _in_place(row) else 0] = row
    return [(size, pair[0], pair[1]) for size, pair in sorted(sizes.items())]


def format_table(rows: list[dict]) -> str:
    """The header, one line per size, and nccl-tests' footer (out-of-bounds count, average busbw
    over every measured side)."""
    lines = [HEADER]
    reasons: list[str] = []
    busbw: list[float] = []
    wrong_total = 0
    for size, oop, ip in per_size(rows):
        first = oop or ip
        op = str(first.get("op"))
        info = OPS.get(op)
        count = _num(oop or {}, "count") or _num(ip or {}, "count")
        redop = str(first.get("reduce_op") or "sum") if info is not None and info.reduces else "none"
        root = ROOT if info is not None and info.rooted else -1
        type_name = TYPE_NAMES.get(str(first.get("dtype")), str(first.get("dtype")))
        lines.append(f"{size:12d}  {int(count or 0):12d}  {type_name:>8}  {redop:>6}  {root:6d}"
                     f"{_side(oop)}{_side(ip)}")
        for row in (oop, ip):
            if row is None:
                continue
            if row.get("status") in ("ok", "wrong"):
                wrong_total += int(_num(row, "wrong") or 0)
                if _num(row, "busbw_gbps") is not None:
                    busbw.append(_num(row, "busbw_gbps"))
            if row.get("status") != "ok":
                side = "in-place" if _in_place(row) else "out-of-place"
                reasons.append(f"# {format_size(size)} {side}: {row.get('status')}: {row.get('reason') or ''}")
    lines.extend(reasons)
    lines.append(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    avg = f"{sum(busbw) / len(busbw):g}" if busbw else "N/A (nothing measured)"
    lines.append(f"# Avg bus bandwidth    : {avg} ")
    return "\n".join(lines)
