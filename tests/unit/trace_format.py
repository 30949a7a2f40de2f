"""A checker for the Chrome Trace Event Format (the JSON Perfetto and chrome://tracing load).

Checks what the format requires of the events commbench writes: the container, each event's
phase, name, pid/tid, timestamps and durations, metadata records, matching async begin/end
pairs, and that complete ("X") slices on one thread nest (Perfetto's importer drops slices
that partly overlap another on the same thread).
"""
from __future__ import annotations

import math
from collections import defaultdict

PHASES = set("BEXiICbnestfPONDMVvRc") | {"(", ")"}
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_chrome_trace(doc) -> list[str]:
    """Problems found (empty when the document is a valid trace)."""
    errs: list[str] = []
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            return ["object form needs a 'traceEvents' list"]
        if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
            errs.append("displayTimeUnit must be 'ms' or 'ns'")
    elif isinstance(doc, list):
        events = doc
    else:
        return ["a trace is a JSON array of events or an object with traceEvents"]
    slices = defaultdict(list)
    open_async: dict[tuple, float] = {}
    for i, e in enumerate(events):
        where = f"event {i}"
        if not isinstance(e, dict):
            errs.append(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            errs.append(f"{where}: unknown phase {ph!r}")
            continue
        if not isinstance(e.get("name"), str) or not e["name"]:
            errs.append(f"{where}: name must be a non-empty string")
        for key in ("pid", "tid"):
            if not isinstance(e.get(key), int) or isinstance(e.get(key), bool):
                errs.append(f"{where}: {key} must be an integer")
        if "args" in e and not isinstance(e["args"], dict):
            errs.append(f"{where}: args must be an object")
        if "cat" in e and not isinstance(e["cat"], str):
            errs.append(f"{where}: cat must be a string")
        if ph == "M":
            if e.get("name") not in METADATA or not isinstance(e.get("args"), dict):
                errs.append(f"{where}: metadata record {e.get('name')!r} without args")
            continue
        if not _num(e.get("ts")) or e["ts"] < 0:
            errs.append(f"{where}: ts must be a number >= 0 (microseconds)")
            continue
        if ph == "X":
            if not _num(e.get("dur")) or e["dur"] < 0:
                errs.append(f"{where}: complete event needs dur >= 0")
                continue
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif ph in "be":
            if "id" not in e and "id2" not in e:
                errs.append(f"{where}: async event without id")
                continue
            key = (e["pid"], e.get("cat"), str(e.get("id")), e["name"])
            if ph == "b":
                open_async[key] = e["ts"]
            elif key not in open_async:
                errs.append(f"{where}: async end without a begin")
            elif e["ts"] < open_async.pop(key):
                errs.append(f"{where}: async end before its begin")
    errs += [f"async begin without end: {k}" for k in open_async]
    for (pid, tid), spans in slices.items():
        stack: list[tuple[float, float, str]] = []
        for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start + 1e-6:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:
                errs.append(f"pid {pid} tid {tid}: {name!r} [{start}, {end}] partly overlaps "
                            f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}]")
            stack.append((start, end, name))
    return errs
