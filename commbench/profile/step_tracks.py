"""The classified step timelines of a Case (timeline/<case_id>.r<rank>.json) as Chrome-trace tracks,
so the overlap of communication and compute can be seen in Perfetto.

Per rank (the trace process of that rank):

- ``steps``: each timed step's window;
- ``comm|compute|copy stream S``: the GPU's records of that kind on stream S, by kernel name
  (records of one stream never overlap, so each track nests);
- ``exposed comm``: communication with no compute or copy beside it, the time the step waited.

Each rank's file counts from its own first timed step (the ranks start their steps after a
barrier), so its tracks start at the trace's origin: a few microseconds of barrier skew between
ranks are not corrected.
"""
from __future__ import annotations

from pathlib import Path

from .. import spans
from ..runfolder import step_timelines

TID_STEPS, TID_EXPOSED, TID_KIND = 50, 51, {"comm": 60, "compute": 70, "copy": 80}
TRACK_STREAMS = 10   # tracks per kind before the rest share the last one


def exposed_spans(intervals: list[dict]) -> list[tuple[float, float]]:
    """Communication time with no compute or copy running (the spans, merged), counted as the
    rows' exposed_comm_us is (commbench/spans.py)."""
    return spans.subtract(spans.spans_of(intervals, "comm"), spans.spans_of(intervals, "compute", "copy"))


def _x(name: str, pid: int, tid: int, start: float, end: float, cat: str, args: dict) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": round(start, 3),
            "dur": round(max(0.0, end - start), 3), "args": args}


def _thread(pid: int, tid: int, name: str) -> list[dict]:
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]


def rank_tracks(doc: dict, rank: int) -> list[dict]:
    """The tracks of one rank's stored timeline (step_timelines.read's document)."""
    events = _thread(rank, TID_STEPS, f"steps ({doc.get('source', '')} timeline)")
    for i, (s, e) in enumerate(doc["steps"]):
        events.append(_x(f"step {i}", rank, TID_STEPS, s, e, "step", {"step_us": round(e - s, 3)}))
    lanes: dict[tuple[str, str], int] = {}
    for iv in doc["intervals"]:
        stream = str(iv.get("stream"))
        key = (iv["kind"], stream)
        if key not in lanes:
            used = sum(1 for k in lanes if k[0] == iv["kind"])
            lanes[key] = TID_KIND[iv["kind"]] + min(used, TRACK_STREAMS - 1)
            if used < TRACK_STREAMS:
                events += _thread(rank, lanes[key], f"{iv['kind']} stream {stream}")
        events.append(_x(iv.get("name") or iv["kind"], rank, lanes[key], iv["start_us"], iv["end_us"],
                         iv["kind"], {"kind": iv["kind"], "stream": iv.get("stream"),
                                      **({"region": iv["region"]} if iv.get("region") else {})}))
    exposed = exposed_spans(doc["intervals"])
    if exposed:
        events += _thread(rank, TID_EXPOSED, "exposed comm")
        events += [_x("exposed comm", rank, TID_EXPOSED, s, e, "exposed", {}) for s, e in exposed]
    return events


def case_tracks(run_dir: Path, case_id: str) -> list[dict]:
    """Every rank's tracks of a Case ([] when it has no stored step timeline)."""
    events: list[dict] = []
    for rank in step_timelines.ranks_of(run_dir, case_id):
        try:
            doc = step_timelines.read(run_dir, case_id, rank)
        except FileNotFoundError:
            continue
        events += rank_tracks(doc, rank)
    return events
