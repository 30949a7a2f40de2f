"""What an nccl-tests output says, as read: one record per invocation (docs/import.md).

Numbers are kept as the file states them, with the rounding of their printed
digits, so the import can check them against commbench's formulas.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import CommbenchError

# Half a unit of the last digit of a JSON number: nccl-tests writes doubles with "%lf".
JSON_HALF_UNIT = 5e-7
# Bounds on what an import reads and believes (docs/import.md, "Limits"): far above any real
# nccl-tests output (a 1 KiB-1 GiB sweep is ~3 KB of text; a -J -I file of 1000 iterations on
# 64 processes a few MB), far below what would exhaust memory.
MAX_FILE_BYTES = 64 * 1024 * 1024      # COMMBENCH_MAX_IMPORT_BYTES lifts it
SIZE_VAR = "COMMBENCH_MAX_IMPORT_BYTES"
MAX_LINE_CHARS = 8192                  # a table line is ~150 characters; NCCL cuts its log lines at 1 KiB
MAX_RANKS = 1 << 20                    # rank numbers and world sizes
MAX_THREADS_OR_GPUS = 1024             # nThread and nGpus per process
MAX_SIZE_BYTES = 1 << 40               # a row's size (commbench's own 1 TiB limit)
MAX_ITERS = 1 << 31                    # warmup, iters, agg iters, graph launches, root, #wrong


class NcclTestsFormatError(CommbenchError):
    """An nccl-tests output file is malformed, truncated or not nccl-tests output."""


@dataclass
class Device:
    rank: int
    host: str
    device: int
    pci: str
    name: str
    group: int = 0
    pid: int | None = None


@dataclass
class Side:
    """One half of a result line: out-of-place or in-place, as printed."""

    in_place: bool
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None                 # None: nccl-tests printed N/A (not checked)
    time_half_unit: float             # rounding of the printed numbers (checks allow this much)
    algbw_half_unit: float
    busbw_half_unit: float
    iter_min_us: float | None = None  # -I per-iteration columns
    iter_max_us: float | None = None
    iter_p99_us: float | None = None  # nccl-tests' own p99 (nearest rank; the table's i_p99, JSON p99_us)
    iter_times_us: list[float] | None = None             # -I in JSON: slowest process per iteration
    per_process_times_us: list[list[float]] | None = None


@dataclass
class ResultLine:
    where: str                        # "file:line" or "file: results[i]"
    size_bytes: int
    count: int
    type_name: str
    redop: str
    root: int
    sides: list[Side]


@dataclass
class TestRun:
    """One nccl-tests invocation: a section of a text file, or one JSON file."""

    path: Path
    where: str
    fmt: str                           # "text" or "json"
    program: str | None = None         # e.g. all_reduce_perf
    version: str | None = None         # nccl-tests version (text only)
    nccl_headers: int | None = None
    nccl_library: int | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int = 1
    validation: int = 1
    graph_launches: int = 0
    unalign: int = 0
    # -R (0 none, 1 user registration, 2 symmetric window) and -a (0 rank 0, 1 avg, 2 min, 3 max,
    # 4 sum): a JSON file's command line says them; a table does not (None: nccl-tests' defaults)
    register: int | None = None
    average: int | None = None
    blocking: int = 0
    per_iter: bool = False
    cputime: bool = False
    devices: list[Device] = field(default_factory=list)
    world_size: int | None = None
    lines: list[ResultLine] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw_gbps: float | None = None
    command: list[str] | None = None
    env: dict[str, str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    errors: list[str] = field(default_factory=list)


def bounded_int(value: int, what: str, where: str, lo: int, hi: int) -> int:
    """``value`` when lo <= value <= hi, else a format error naming the place and the bound."""
    if not lo <= value <= hi:
        raise NcclTestsFormatError(f"{where}: {what} {value} is outside {lo}..{hi}: no nccl-tests run "
                                   f"prints that; the file is damaged or edited.")
    return value


def parse_int(token, what: str, where: str, lo: int, hi: int) -> int:
    """An integer token (text or JSON value) within lo..hi; anything else names the place."""
    text = str(token).strip()
    if isinstance(token, bool) or len(text) > 24:
        raise NcclTestsFormatError(f"{where}: {what} {text[:40]!r} is not an integer within {lo}..{hi}")
    try:
        value = int(text)
    except ValueError:
        raise NcclTestsFormatError(f"{where}: {what} {text[:40]!r} is not an integer") from None
    return bounded_int(value, what, where, lo, hi)


def version_string(code: int | None) -> str | None:
    """NCCL_VERSION_CODE as 'major.minor.patch' (2.9+ codes are major*10000 + minor*100 + patch)."""
    if not code:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def half_unit(printed: str) -> float:
    """Half a unit of the last printed digit of a "%f"/"%e"-style number: its rounding error."""
    t = printed.strip().lower()
    exp = 0
    if "e" in t:
        t, e = t.split("e", 1)
        exp = int(e)
    decimals = len(t.split(".", 1)[1]) if "." in t else 0
    return 0.5 * 10.0 ** (exp - decimals)


def option_value(command: list[str] | None, short: str, long: str) -> str | None:
    """The value an nccl-tests command line gives option -``short`` / --``long`` (the last one wins,
    as getopt's), in any of getopt's spellings: ``-R 1``, ``-R1``, ``--local_register 1``,
    ``--local_register=1``; None when the command does not give it."""
    value, args = None, list(command or [])[1:]
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a in (f"-{short}", f"--{long}"):
            value, i = nxt, i + 2
            continue
        if a.startswith(f"--{long}="):
            value = a.split("=", 1)[1]
        elif a.startswith(f"-{short}") and not a.startswith("--") and len(a) > 2:
            value = a[2:]
        i += 1
    return value
