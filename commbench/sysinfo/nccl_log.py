"""Read what NCCL actually did from its debug output (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=TUNING).

NCCL prints one TUNING line per collective it plans, on rank 0 of the
communicator only. Three shapes exist across releases:

- 2.19+:   ``AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}``
           (some releases append `` comm 0x...``)
- < 2.19:  ``AllReduce: 4096 Bytes -> Algo 1 proto 0 time 12.3`` (numeric ids)
- 2.27+ symmetric kernels (window-registered buffers):
           ``AllReduce [Symmetric]: 4096 Bytes -> Kernel AllReduce_AGxLL_R nchannels 2 nthreads 512 nWorks 1``

Public API (also used by the collectives family):

- :func:`debug_env` -- variables that make NCCL write those lines to a file per process.
- :func:`resolve_debug_file` -- the file NCCL writes for this process (``%h``/``%p`` expanded).
- :class:`LogCursor` -- read only what was appended since the last Case.
- :func:`parse_tuning` -- text -> list of :class:`TuningChoice`.
- :func:`summarize` -- choices for one (function, size) -> ``nccl_algo``/``nccl_proto``/``nccl_kernel``.
- :func:`requested_algos`, :func:`algo_honoured` -- did NCCL obey a forced ``NCCL_ALGO``?
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Canonical names are the spellings NCCL_ALGO / NCCL_PROTO accept.
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
SYMMETRIC = "Symmetric"

_ALGO_ALIASES = {a.upper(): a for a in ALGOS} | {
    "COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain", "NVLS_TREE": "NVLSTree",
    "COLLNET": "CollNetDirect",  # pre-2.14 builds had a single CollNet algorithm
}
_PROTO_ALIASES = {p.upper(): p for p in PROTOS}
# Numeric ids printed by releases before 2.19 (order of NCCL_ALGO_* / NCCL_PROTO_* defines).
_ALGO_BY_ID = dict(enumerate(ALGOS))
_PROTO_BY_ID = dict(enumerate(PROTOS))

_TUNING_RE = re.compile(
    r"NCCL INFO (?:(?P<func>[A-Za-z]+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?(?:.*? comm (?P<comm>0x[0-9a-fA-F]+))?"
)
_SYMK_RE = re.compile(
    r"NCCL INFO (?P<func>[A-Za-z]+) \[Symmetric\]: (?P<bytes>\d+) Bytes -> Kernel (?P<kernel>\S+)"
    r"(?: nchannels (?P<nch>\d+))?"
)


@dataclass(frozen=True)
class TuningChoice:
    """One planned collective as NCCL reported it."""

    func: str          # "AllReduce", "AllGather", ... ("" when the release did not print it)
    size_bytes: int    # count * element size, as NCCL prints it
    algo: str          # canonical NCCL_ALGO name, or "Symmetric" for symmetric kernels
    proto: str         # canonical NCCL_PROTO name ("" for symmetric kernels)
    kernel: str = ""   # symmetric kernel name
    channels: int | None = None
    comm: str = ""


def _canon_algo(raw: str) -> str:
    if raw.isdigit():
        return _ALGO_BY_ID.get(int(raw), raw)
    return _ALGO_ALIASES.get(raw.upper(), raw)


def _canon_proto(raw: str) -> str:
    if raw.isdigit():
        return _PROTO_BY_ID.get(int(raw), raw)
    return _PROTO_ALIASES.get(raw.upper(), raw)


def parse_tuning(text: str) -> list[TuningChoice]:
    """Every TUNING choice line in ``text``, in order. Other lines are ignored."""
    out: list[TuningChoice] = []
    for line in text.splitlines():
        if "Bytes ->" not in line:
            continue
        m = _SYMK_RE.search(line)
        if m:
            nch = m.group("nch")
            out.append(TuningChoice(m.group("func"), int(m.group("bytes")), SYMMETRIC, "",
                                    kernel=m.group("kernel"), channels=int(nch) if nch else None))
            continue
        m = _TUNING_RE.search(line)
        if m:
            lo, hi = m.group("lo"), m.group("hi")
            out.append(TuningChoice(
                m.group("func") or "", int(m.group("bytes")), _canon_algo(m.group("algo")),
                _canon_proto(m.group("proto")),
                channels=int(hi) - int(lo) + 1 if lo is not None else None,
                comm=m.group("comm") or ""))
    return out


def summarize(choices: list[TuningChoice], func: str = "AllReduce",
              size_bytes: int | None = None) -> dict[str, str]:
    """Columns for one Case: ``nccl_algo``, ``nccl_proto``, ``nccl_kernel``.

    Only choices for ``func`` (or lines without a function name) and, when
    given, ``size_bytes`` count. If NCCL chose differently across calls, the
    distinct values are joined with '+', most frequent first. Empty strings
    mean NCCL printed nothing for this op (e.g. a 1-rank communicator).
    """
    sel = [c for c in choices if c.func in (func, "")
           and (size_bytes is None or c.size_bytes == size_bytes)]

    def join(values: list[str]) -> str:
        return "+".join(v for v, _ in Counter(v for v in values if v).most_common())

    return {"nccl_algo": join([c.algo for c in sel]), "nccl_proto": join([c.proto for c in sel]),
            "nccl_kernel": join([c.kernel for c in sel])}


_FUNC_KEYS = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
              "broadcast": "Broadcast", "reduce": "Reduce", "sendrecv": "SendRecv"}


def algo_spec_for(value: str | None, func: str = "AllReduce") -> str | None:
    """The part of an ``NCCL_ALGO`` value that applies to ``func`` (None: no restriction).

    Handles the per-function form ``allreduce:tree,ring;allgather:ring``.
    """
    if not value or not value.strip():
        return None
    spec = value.strip()
    if ":" not in spec:
        return spec
    chosen = None
    for part in spec.split(";"):
        key, sep, lst = part.partition(":")
        if not sep:  # an entry without "func:" applies to every function
            chosen = key if chosen is None else chosen
        elif _FUNC_KEYS.get(key.strip().lower()) == func:
            chosen = lst
    return chosen.strip() if chosen and chosen.strip() else None


def requested_algos(value: str | None, func: str = "AllReduce") -> frozenset[str] | None:
    """Algorithms an ``NCCL_ALGO`` value allows for ``func``; None when it does not restrict.

    Understands ``Ring``, ``ring,tree``, ``^NVLS`` (exclusion) and the per-function
    form. ``CollNet`` means both CollNet variants.
    """
    spec = algo_spec_for(value, func)
    if spec is None:
        return None
    exclude = spec.startswith("^")
    names: set[str] = set()
    for raw in spec.lstrip("^").split(","):
        raw = raw.strip()
        if not raw:
            continue
        if raw.upper() == "COLLNET":
            names |= {"CollNetDirect", "CollNetChain"}
        else:
            names.add(_canon_algo(raw))
    return frozenset(set(ALGOS) - names) if exclude else frozenset(names)


def algo_honoured(requested: str | None, used_algo: str, func: str = "AllReduce") -> bool | None:
    """True/False when a forced NCCL_ALGO was/was not obeyed; None when unknown or not forced.

    ``used_algo`` is :func:`summarize`'s ``nccl_algo`` (may hold several joined by '+').
    Symmetric kernels bypass NCCL_ALGO, so they count as not honoured.
    """
    allowed = requested_algos(requested, func)
    if allowed is None or not used_algo:
        return None
    return all(a in allowed for a in used_algo.split("+"))


def debug_env(log_dir: str | os.PathLike, current: dict[str, str] | None = None) -> dict[str, str]:
    """Variables to add so NCCL writes TUNING lines to ``log_dir/nccl-<host>-<pid>.log``.

    Keeps a user's own ``NCCL_DEBUG_FILE``; keeps a more verbose ``NCCL_DEBUG``
    (TRACE); adds TUNING to an existing ``NCCL_DEBUG_SUBSYS``. Must be applied
    before the process creates its first NCCL communicator: NCCL reads these once.
    """
    cur = dict(os.environ if current is None else current)
    out: dict[str, str] = {}
    if cur.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        out["NCCL_DEBUG"] = "INFO"
    subsys = cur.get("NCCL_DEBUG_SUBSYS", "")
    if not subsys:
        out["NCCL_DEBUG_SUBSYS"] = "INIT,TUNING"
    elif "TUNING" not in subsys.upper() and "ALL" not in subsys.upper() and not subsys.startswith("^"):
        out["NCCL_DEBUG_SUBSYS"] = subsys + ",TUNING"
    if not cur.get("NCCL_DEBUG_FILE"):
        out["NCCL_DEBUG_FILE"] = str(Path(log_dir) / "nccl-%h-%p.log")
    return out


def resolve_debug_file(pattern: str | None = None, *, host: str | None = None,
                       pid: int | None = None) -> Path | None:
    """The file NCCL writes for this process, from ``NCCL_DEBUG_FILE`` (``%h`` host, ``%p`` pid)."""
    pattern = os.environ.get("NCCL_DEBUG_FILE") if pattern is None else pattern
    if not pattern:
        return None
    if host is None:
        import socket   # here: validate imports this module and never needs it

        host = socket.gethostname()
    pid = os.getpid() if pid is None else pid
    path = Path(pattern.replace("%h", host).replace("%p", str(pid)))
    if not path.exists() and "%h" in pattern:
        # NCCL cuts the host name at the first '.', so the FQDN may not match: look it up.
        found = sorted(Path(pattern).parent.glob(Path(pattern).name.replace("%h", "*").replace("%p", str(pid))))
        if len(found) == 1:
            return found[0]
    return path


class LogCursor:
    """Reads a growing log file from where the previous read stopped (one cursor per Case series)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self.offset = self.path.stat().st_size if self.path and self.path.exists() else 0

    def read_new(self) -> str:
        if not self.path or not self.path.exists():
            return ""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        # Keep a partial last line for the next read.
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        return data[:cut].decode("utf-8", errors="replace")

    def choices(self) -> list[TuningChoice]:
        return parse_tuning(self.read_new())
