"""`commbench trace`: one Chrome-trace JSON per Case merging all its ranks (Perfetto, chrome://tracing).

Per rank (one trace process each, named "rank R (host)"):

- ``iterations``: each timed iteration from the rank's start to its end (timeline.csv);
- ``host API calls`` and ``host enqueue``: each NCCL API call and task enqueue (``--profile nccl``);
- ``kernel ch N``: each NCCL kernel channel from its GPU start to its GPU end;
- ``proxy ch N send|recv peer P``: each proxy op (network work of a channel) and its first steps;
- ``steps``, ``comm|compute|copy stream S`` and ``exposed comm``: a training or MoE-layer Case's
  classified step timeline (timeline/<case_id>.r<rank>.json; profile/step_tracks.py), from the
  rank's first timed step.

Every stamp is moved onto rank 0's clock with the offsets measured for the Case
(traces/cases.jsonl) and shown relative to the Case's earliest start, in
microseconds (the format's unit). GPU stamps are first put on their rank's host
clock (commbench.profile.nccl_records.gpu_to_host_ns).
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ..errors import CommbenchError, RunFolderError
from . import nccl_plugin, nccl_records, step_tracks
from ..runfolder import check, files, timeline_files, trace_files

TID_ITER, TID_CALL, TID_ENQUEUE, TID_KERNEL, TID_PROXY = 0, 1, 2, 100, 1000


class TraceError(CommbenchError):
    """The run folder has no per-rank data for a Case (or no such Case)."""


class TraceDataError(TraceError):
    """A Case's per-rank data is incomplete (a rank missing): never skipped, never drawn in part."""


class TraceWriteError(CommbenchError):
    """A trace file could not be written (full disk, read-only folder, a link in the way)."""

    exit_code = 1   # not bad input


def _meta(pid: int, tid: int | None, name: str, sort: int) -> list[dict]:
    if tid is None:
        return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}]
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort}}]


def _span(name: str, pid: int, tid: int, start_us: float, end_us: float, cat: str, args: dict | None = None) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": round(start_us, 3),
            "dur": round(max(0.0, end_us - start_us), 3), "args": args or {}}


def _async(name: str, pid: int, tid: int, start_us: float, end_us: float, cat: str, ident: str,
           args: dict) -> list[dict]:
    """A begin/end pair of async events (they may overlap each other, unlike complete events)."""
    base = {"name": name, "cat": cat, "pid": pid, "tid": tid, "id": ident}
    return [{**base, "ph": "b", "ts": round(start_us, 3), "args": args},
            {**base, "ph": "e", "ts": round(max(start_us, end_us), 3)}]


def _nccl_lines(run_dir: Path, case_id: str, host: str, pid: int) -> list[dict]:
    lines: list[dict] = []
    for path in nccl_plugin.own_files(nccl_plugin.traces_dir(run_dir), pid):
        if f"nccl-{host}-" not in path.name and host:
            continue
        if os.path.islink(path) or not path.is_file():
            raise TraceDataError(f"{path}: not a regular file (a link or something else was put there): refused")
        records = [d for d in nccl_records.parse_lines(check.read_text(path)) if isinstance(d, dict)]
        part = nccl_records.between_marks(records, f"begin {case_id}", f"end {case_id}")
        lines += part or []
    return lines


def _rank_nccl_events(run_dir: Path, case_id: str, rank: int, lines: list[dict], common, lanes) -> list[dict]:
    """The plugin records of one rank as trace events; records of the wrong shape name the folder."""
    try:
        return _nccl_events(nccl_records.tasks_of(lines), rank, common, lanes)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise TraceDataError(f"{nccl_plugin.traces_dir(run_dir)}: the NCCL records of Case {case_id} rank {rank} "
                             f"are damaged ({type(exc).__name__}: {str(exc)[:80]})") from None


class _Lanes:
    """Thread ids of one rank's trace: slices on one thread must nest, so every stream of
    events that can overlap another (a send and a receive on one channel) gets its own lane."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self._proxy: dict[tuple, int] = {}

    def next_id(self) -> int:
        self._ids = getattr(self, "_ids", 0) + 1
        return self._ids

    def fixed(self, tid: int, name: str) -> int:
        self.names[tid] = name
        return tid

    def proxy(self, ch: int, kind: str, peer: int) -> int:
        key = (ch, kind, peer)
        if key not in self._proxy:
            self._proxy[key] = TID_PROXY + len(self._proxy)
            self.names[self._proxy[key]] = f"proxy ch {ch} {kind} peer {peer}"
        return self._proxy[key]


def _nccl_events(tasks, rank: int, common, lanes: _Lanes) -> list[dict]:
    """API call, enqueue, kernel-channel and proxy events of one rank; ``common(ns)`` maps its host
    clock to trace microseconds."""
    out: list[dict] = []
    gpu_offset = nccl_records.gpu_to_host_ns(tasks)
    for t in tasks:
        label = f"{t.func} #{t.seq}" if t.kind == "coll" else f"{t.func} peer {t.root_or_peer}"
        args = {"seq": t.seq, "bytes": t.bytes, "algo": t.algo, "proto": t.proto, "channels": t.nchannels,
                "complete": t.complete}
        if t.api_ns and t.api_ns[1] > t.api_ns[0]:
            out.append(_span(f"{label} call", rank, lanes.fixed(TID_CALL, "host API calls"), common(t.api_ns[0]),
                             common(t.api_ns[1]), "enqueue", args))
        if t.enq_ns[1] > t.enq_ns[0]:
            out.append(_span(f"{label} enqueue", rank, lanes.fixed(TID_ENQUEUE, "host enqueue"), common(t.enq_ns[0]),
                             common(t.enq_ns[1]), "enqueue", args))
        for ch, g0, g1, _h0, _h1 in t.channels:
            if gpu_offset is None or not g0 or not g1:
                continue
            tid = lanes.fixed(TID_KERNEL + ch, f"kernel ch {ch}")
            out.append(_span(f"{label} ch{ch}", rank, tid, common(g0 + gpu_offset), common(g1 + gpu_offset),
                             "kernel", {**args, "gpu_ns": g1 - g0}))
        for p in t.proxies:
            kind = "send" if p.get("send") else "recv"
            tid = lanes.proxy(int(p["ch"]), kind, int(p["peer"]))
            if p.get("stop_ns", 0) > p.get("start_ns", 0):
                out.append(_span(f"{label} proxy {kind}", rank, tid, common(p["start_ns"]), common(p["stop_ns"]),
                                 "proxy", {"steps": p.get("steps"), "bytes": p.get("bytes")}))
            for step, s0, s1, nbytes in p.get("step_ns", []):
                if s1 > s0:   # steps of one op overlap (several in flight): async slices, not nested ones
                    out += _async(f"{kind} step {step}", rank, tid, common(s0), common(s1), "proxy step",
                                  f"r{rank}t{tid}s{lanes.next_id()}", {"bytes": nbytes})
    return out


def case_trace(run_dir: Path, case_id: str, warn=None) -> dict:
    """The Chrome-trace document of one Case (raises TraceError when the run lacks its data);
    ``warn(message)`` hears of a per-rank file's cut last line, left out."""
    run_dir = Path(run_dir)
    lines = timeline_files.load_case_lines(run_dir, warn)
    if case_id not in lines:
        raise TraceError(f"{run_dir}: no per-rank data for Case {case_id} (traces/cases.jsonl has "
                         f"{len(lines)} Case(s); per-rank data is written for Cases run by this version)")
    info = lines[case_id]
    timeline = timeline_files.load_timeline(run_dir, warn)
    timeline = timeline[timeline["case_id"] == case_id]
    listed = {int(r["rank"]) for r in info["ranks"]}
    drawn = {int(x) for x in timeline["rank"].unique()}
    if drawn and drawn != listed:
        raise TraceDataError(
            f"{run_dir / 'timeline.csv'}: Case {case_id} has iterations of rank(s) {_ranks(drawn)} but "
            f"traces/cases.jsonl lists rank(s) {_ranks(listed)}: the per-rank data is incomplete, so no "
            f"trace is written for it")
    t0 = info.get("t0_ns")
    events: list[dict] = []
    for r in info["ranks"]:
        rank, offset = int(r["rank"]), int(r.get("offset_ns") or 0)
        events += _meta(rank, None, f"rank {rank} ({r['host']})", rank)
        events += _meta(rank, TID_ITER, "iterations", 0)
        for it in timeline[timeline["rank"] == rank].itertuples():
            events.append(_span(f"iteration {it.iteration}", rank, TID_ITER, float(it.start_us), float(it.end_us),
                                "iteration", {"source": it.source}))
        if info.get("profiled") != "nccl" or t0 is None:
            continue
        if r.get("pid") is None:
            raise TraceDataError(f"{run_dir / 'traces' / 'cases.jsonl'}: Case {case_id} rank {rank} has no pid: "
                                 f"its NCCL records cannot be found")

        def common(ns: int, _off=offset) -> float:
            return (ns - _off - t0) / 1e3
        lanes = _Lanes()
        events += _rank_nccl_events(run_dir, case_id, rank, _nccl_lines(run_dir, case_id, r["host"], int(r["pid"])),
                                    common, lanes)
        for tid, name in sorted(lanes.names.items()):
            events += _meta(rank, tid, name, tid)
    try:
        events += step_tracks.case_tracks(run_dir, case_id)
    except RunFolderError as exc:
        raise TraceDataError(str(exc)) from None
    timed = [e for e in events if e["ph"] != "M"]
    shift = -min((e["ts"] for e in timed), default=0.0)
    if shift > 0:   # a GPU stamp moved by an offset estimate can land just before the first start
        for e in timed:
            e["ts"] = round(e["ts"] + shift, 3)
    if not any(e["ph"] == "X" for e in events):
        raise TraceError(f"{run_dir}: Case {case_id} has no timed spans to draw (one rank, or a timing mode "
                         "without per-iteration starts: pipelined, graph, a family's own)")
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"case_id": case_id, "clock": "rank 0 CLOCK_MONOTONIC, us from the Case's earliest start",
                          "origin_shift_us": round(max(shift, 0.0), 3),
                          "clock_error_ns": {str(r["rank"]): r.get("clock_error_ns") for r in info["ranks"]}}}


def _ranks(ranks: set[int]) -> str:
    shown = sorted(ranks)
    return ", ".join(map(str, shown[:8])) + (" ..." if len(shown) > 8 else "")


def write_case_traces(run_dir: Path, case_ids: list[str] | None = None, out: Path | None = None,
                      warn=None) -> list[Path]:
    """Write traces/chrome/<case_id>.json for the given Cases (default: every Case with per-rank data).

    Every trace is built before the first is written, so a damaged Case writes nothing; a per-rank
    file whose last line was cut is read without it (``warn(message)`` is told)."""
    run_dir = Path(run_dir)
    for cid in case_ids or ():
        problem = timeline_files.case_id_problem(cid)
        if problem:
            raise TraceError(f"--case {cid[:80]!r}: not a case id: {problem}")
    ids = case_ids or list(timeline_files.load_case_lines(run_dir, warn))
    if not ids:
        raise TraceError(f"{run_dir}: no per-rank data (traces/cases.jsonl) to build traces from")
    docs = []
    for cid in ids:
        try:
            docs.append((cid, case_trace(run_dir, cid, warn)))
        except TraceDataError:
            raise
        except TraceError:
            if case_ids:          # asked for by name: say why
                raise
            continue              # one-rank or pipelined Cases simply have nothing to draw
    if not docs:
        raise TraceError(f"{run_dir}: no Case has per-rank spans to draw")
    if out and len(ids) == 1:
        try:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceWriteError(f"cannot create {Path(out).parent}: {exc.strerror or exc}") from None
        return [_write_json(Path(out), docs[0][1])]
    return [_store(run_dir, cid, doc) for cid, doc in docs]


def _store(run_dir: Path, case_id: str, doc: dict) -> Path:
    """RUN/traces/chrome/<case_id>.json through the run folder's files (no link followed, a twin
    renamed over it); a full or read-only disk or a link in the way is a TraceWriteError."""
    path = run_dir / "traces" / "chrome" / f"{case_id}.json"
    data = _encode(path, doc)
    try:
        return trace_files.write_chrome(run_dir, case_id, data)
    except RunFolderError as exc:
        raise TraceWriteError(f"{exc}: no trace is written through it") from None
    except OSError as exc:
        raise TraceWriteError(_cannot_write(path, exc)) from None


def _encode(path: Path, doc: dict) -> bytes:
    try:
        return json.dumps(doc, allow_nan=False).encode()
    except ValueError:   # the readers refuse nan; this is the last guard against bare NaN in the JSON
        raise TraceDataError(f"{path}: the trace holds a non-finite number; nothing written") from None


def _cannot_write(path: Path, exc: OSError) -> str:
    full = " (the disk or quota is full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return f"cannot write {path}: {exc.strerror or exc}{full}; no trace file was left there"


def _write_json(path: Path, doc: dict) -> Path:
    """Write ``doc`` (the file `--output` names, outside the run folder) to a temporary twin beside
    ``path``, then rename it over ``path``: a link planted at ``path`` is replaced, never followed,
    and a full disk leaves no cut file."""
    data = _encode(path, doc)
    try:
        files.replace_whole(path.parent, path.name, data)
    except RunFolderError as exc:   # a name no file may have
        raise TraceWriteError(f"{exc}: no trace is written") from None
    except OSError as exc:
        raise TraceWriteError(_cannot_write(path, exc)) from None
    return path
