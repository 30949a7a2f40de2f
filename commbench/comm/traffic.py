"""alltoallv traffic matrices: who sends how many elements to whom, and where they land.

A suite's ``traffic`` parameter is a generator or a file (docs/metrics.md, "alltoallv"):

- ``uniform``: every rank sends size/n to every rank (alltoall's traffic);
- ``zipf:S``: destination d gets a share proportional to 1/(d+1)^S from every sender, so rank 0
  receives most (skewed expert load);
- ``hot_rank:R`` or ``hot_rank:R:F``: rank R receives F times (default 4) the share of any other;
- ``spread:S`` (S in 0..1): nccl-tests 2.19 alltoallv's generated pattern, a blend of uniform
  (S = 0) and shares growing with the rank distance (dst - src) mod n (S = 1, its default);
- a path ending in ``.csv`` or ``.json``: a square matrix of bytes, row = sender, column =
  receiver (at least n x n; the leading n x n is used). Its shape is kept and the sweep's size
  sets the scale: the busiest sender sends ``size_bytes``. A suite's relative path is made
  absolute from the suite file's folder when the suite is loaded (FILE_SUFFIXES).

Each sender's row holds exactly ``size_bytes // elem`` elements (largest remainders round), so
generated traffic never loses or invents bytes. Pure Python: the check and the metrics use the
same matrix on every rank.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

DEFAULT_HOT_FACTOR = 4.0
GENERATORS = ("uniform", "zipf", "hot_rank", "spread")
FILE_SUFFIXES = (".csv", ".json")   # a spec ending so names a matrix file
MAX_MATRIX_RANKS = 1 << 14


class TrafficError(ValueError):
    """A traffic spec or matrix file that cannot be used."""


class TooFewRanks(TrafficError):
    """A spec this many ranks cannot have (a hot rank beyond them, a smaller matrix): the Case
    cannot run at this rank count, as opposed to a file that is missing or malformed."""


def spec_problem(spec: str) -> str | None:
    """What is wrong with a ``traffic`` value before any rank count is known (None when usable)."""
    try:
        _parse(spec)
    except TrafficError as exc:
        return str(exc)
    return None


def _parse(spec: str) -> tuple[str, list]:
    text = spec.strip()
    if text.endswith(FILE_SUFFIXES):
        if not Path(text).is_file():
            raise TrafficError(f"file {text} does not exist")
        return "file", [text]
    name, *args = text.split(":")
    if name not in GENERATORS:
        raise TrafficError("must be uniform, zipf:S, hot_rank:R[:F], spread:S or a .csv/.json matrix file")
    try:
        nums = [float(a) for a in args]
    except ValueError:
        raise TrafficError(f"{name}: its arguments must be numbers") from None
    want = {"uniform": (0, 0), "zipf": (1, 1), "hot_rank": (1, 2), "spread": (1, 1)}[name]
    if not want[0] <= len(nums) <= want[1]:
        usage = {"zipf": "zipf:S", "hot_rank": "hot_rank:R or hot_rank:R:F", "spread": "spread:S"}.get(name, name)
        raise TrafficError(f"{name} is written {usage}")
    if name == "zipf" and not 0 <= nums[0] <= 16:
        raise TrafficError("zipf's S must be within 0..16")
    if name == "spread" and not 0 <= nums[0] <= 1:
        raise TrafficError("spread's S must be within 0..1")
    if name == "hot_rank":
        if nums[0] < 0 or nums[0] != int(nums[0]):
            raise TrafficError("hot_rank's R must be a rank number")
        if len(nums) == 2 and not 1 <= nums[1] <= 1e6:
            raise TrafficError("hot_rank's factor F must be within 1..1e6")
    return name, nums


def weights(spec: str, n: int) -> list[list[float]]:
    """The n x n matrix of relative shares (row = sender), before scaling."""
    name, args = _parse(spec)
    if name == "uniform":
        return [[1.0] * n for _ in range(n)]
    if name == "zipf":
        row = [1.0 / (d + 1) ** args[0] for d in range(n)]
        return [list(row) for _ in range(n)]
    if name == "hot_rank":
        hot = int(args[0])
        if hot >= n:
            raise TooFewRanks(f"hot_rank {hot} is not a rank of {n}")
        factor = args[1] if len(args) > 1 else DEFAULT_HOT_FACTOR
        row = [factor if d == hot else 1.0 for d in range(n)]
        return [list(row) for _ in range(n)]
    if name == "spread":
        return [_spread_row(src, n, args[0]) for src in range(n)]
    return read_matrix(Path(args[0]), n)


def _spread_row(src: int, n: int, s: float) -> list[float]:
    """Shares of sender ``src``: (1 - s) uniform + s in proportion to the distance (dst - src) mod n."""
    if n == 1:
        return [1.0]
    pairs = n * (n - 1) / 2
    return [(1 - s) / n + s * ((d - src) % n) / pairs for d in range(n)]


def read_matrix(path: Path, n: int) -> list[list[float]]:
    """The leading n x n of a square byte matrix in a CSV (commas or whitespace) or JSON file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TrafficError(f"{path}: cannot read the traffic matrix ({exc.strerror or exc})") from None
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrafficError(f"{path}: not valid JSON ({exc.msg})") from None
        if isinstance(rows, dict):
            rows = rows.get("bytes")
    else:
        rows = [[c for cell in line for c in cell.split()] for line in csv.reader(text.splitlines()) if line]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise TrafficError(f"{path}: not a matrix (a list of rows of bytes)")
    if len(rows) > MAX_MATRIX_RANKS or any(len(r) != len(rows) for r in rows):
        raise TrafficError(f"{path}: the matrix must be square (rows = senders, columns = receivers)")
    if len(rows) < n:
        raise TooFewRanks(f"{path}: a {len(rows)} x {len(rows)} matrix cannot describe {n} ranks")
    out = []
    for i, row in enumerate(rows[:n]):
        vals = []
        for j, cell in enumerate(row[:n]):
            try:
                v = float(cell)
            except (TypeError, ValueError):
                raise TrafficError(f"{path}: row {i} column {j}: {cell!r} is not a number of bytes") from None
            if not v >= 0 or v == float("inf"):
                raise TrafficError(f"{path}: row {i} column {j}: bytes must be finite and >= 0")
            vals.append(v)
        out.append(vals)
    if not any(any(r) for r in out):
        raise TrafficError(f"{path}: the leading {n} x {n} matrix moves no bytes")
    return out


def _split(total: int, shares: list[float]) -> list[int]:
    """``total`` split in proportion to ``shares`` (largest remainders), summing to ``total``."""
    s = sum(shares)
    if s <= 0 or total <= 0:
        return [0] * len(shares)
    exact = [total * w / s for w in shares]
    parts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def counts(spec: str, n: int, size_bytes: int, elem_bytes: int) -> list[list[int]]:
    """Elements rank src sends to rank dst: counts[src][dst]. Generators give every sender
    ``size_bytes // elem_bytes`` elements; a file keeps its shape and its busiest sender sends that many."""
    total = size_bytes // elem_bytes
    w = weights(spec, n)
    if _parse(spec)[0] != "file":
        return [_split(total, row) for row in w]
    busiest = max(sum(row) for row in w)
    return [_split(round(total * sum(row) / busiest), row) for row in w]


def algbw_elements(matrix: list[list[int]]) -> int:
    """Elements that alltoallv's algbw divides by time: the busiest rank's larger side (what it
    sends or what it receives), as nccl-tests 2.19's alltoallv."""
    n = len(matrix)
    sent = [sum(row) for row in matrix]
    received = [sum(matrix[s][d] for s in range(n)) for d in range(n)]
    return max(max(sent), max(received)) if n else 0


def displacements(per_peer: list[int]) -> list[int]:
    """Start of each peer's block in a buffer of consecutive blocks."""
    out, at = [], 0
    for c in per_peer:
        out.append(at)
        at += c
    return out


class Layout:
    """One rank's view of a matrix: what it sends to and receives from each peer, and where."""

    def __init__(self, matrix: list[list[int]], rank: int):
        n = len(matrix)
        self.send_counts = list(matrix[rank])
        self.recv_counts = [matrix[src][rank] for src in range(n)]
        self.send_displs = displacements(self.send_counts)
        self.recv_displs = displacements(self.recv_counts)
        # where each sender's block to this rank starts in the sender's own send buffer
        self.source_displs = [displacements(matrix[src])[rank] for src in range(n)]
        self.send_total = sum(self.send_counts)
        self.recv_total = sum(self.recv_counts)
        self.busiest = algbw_elements(matrix)   # every rank sizes its buffers by it (equal windows)

    def expected_blocks(self):
        """(src, start in recv, length, start in src's send buffer) of every block received."""
        return [(src, self.recv_displs[src], c, self.source_displs[src])
                for src, c in enumerate(self.recv_counts) if c]
