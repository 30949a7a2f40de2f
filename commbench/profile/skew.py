"""Per-iteration start and end of every rank on one clock; skew and the late rank (docs/profiling.md).

A rank's *start* of iteration i is when it arrived at the op: with host timing,
the stamp just before it entered the op; with CUDA events, the later of "its
stream was free" (the batch's first event, anchored to the host clock when it was
recorded on an idle stream, plus the event times of the iterations before) and
"its host enqueued the op" (a rank whose host is late starves its GPU). A rank's
*end* is when the op returned (host) or its end event fired (events). With
``--profile nccl`` the first kernel channel's GPU start and the last one's end,
put on the host clock by the plugin, replace the events estimate.

Per iteration: skew = latest start - earliest start on rank 0's clock. The late
rank of an iteration is the one that arrived last *by its own delay*: the rank
whose start came longest after its own end of the previous iteration (its own
clock, so no offset error enters). Plain "last to start" would blame the wrong
rank: in a pipelined batch the straggler's ring neighbour finishes every op last
(it waited for the straggler's data) and so starts the next one last, and on a
busy host each rank's wake-up after an op adds noise of its own; a rank's gap
between two of its ops holds only what that rank itself added. Iteration 0 has
no previous op and is left out of the attribution (not of the skew). Per Case:
``skew_us`` is the median skew, ``late_rank`` the rank most often late,
``late_share`` how often it was, ``late_gap_us`` its median own delay.

``COMMBENCH_INJECT_DELAY=RANK:US`` makes RANK wait US microseconds (busy, so
it is exact) before each timed op: a straggler on purpose, to check the above.
"""
from __future__ import annotations

import os
import statistics
import time
from collections import Counter

INJECT_ENV = "COMMBENCH_INJECT_DELAY"


def injected_delay_ns(rank: int, env: dict | None = None) -> int:
    """Delay to add before each timed op on ``rank`` (0 unless COMMBENCH_INJECT_DELAY names it)."""
    spec = (env if env is not None else os.environ).get(INJECT_ENV, "")
    if not spec:
        return 0
    who, _, us = spec.partition(":")
    try:
        return int(float(us) * 1e3) if int(who) == rank else 0
    except ValueError:
        return 0


def _spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class Arrivals:
    """Wraps a Case's timed op: stamps before and after each call (and injects a delay if asked)."""

    def __init__(self, rank: int):
        self.delay_ns = injected_delay_ns(rank)
        self.entered: list[int] = []   # each call's entry, before an injected delay
        self.before: list[int] = []    # each op's enqueue (after the delay)
        self.after: list[int] = []
        self.anchor_ns: int | None = None   # host time the batch's first event fired (events mode)

    def record_native(self, host_ns: list[int]) -> None:
        """Stamps of a native events loop: the first event's record, then each op's enqueue."""
        if host_ns:
            self.anchor_ns, self.before = host_ns[0], list(host_ns[1:])

    def wrap(self, run):
        entered, before, after, delay = self.entered, self.before, self.after, self.delay_ns
        clock = time.perf_counter_ns

        def op():
            entered.append(clock())
            if delay:
                _spin(delay)
            before.append(clock())
            run()
            after.append(clock())
        return op

    def timeline(self, mode: str, samples_us: list[float]) -> tuple[list[tuple[int, int]], str] | None:
        """[(start_ns, end_ns)] per timed iteration on this rank's clock, and how it was found."""
        n = len(samples_us)
        if n == 0 or len(self.before) < n:
            return None
        before = self.before[-n:]
        if mode == "host" and len(self.after) >= n:
            return list(zip(before, self.after[-n:])), "host"
        if mode == "events":
            # Python loop: the first event was recorded just before the first op's call was entered
            # (not its enqueue stamp: an injected delay comes between, and the anchor would carry it)
            entered = self.entered[-n:] if len(self.entered) >= n else before
            anchor = self.anchor_ns if self.anchor_ns is not None else entered[0]
            out, elapsed = [], 0.0
            for i, t_us in enumerate(samples_us):
                ready = anchor + int(elapsed * 1e3)
                elapsed += t_us
                out.append((max(ready, before[i]), anchor + int(elapsed * 1e3)))
            return out, "events"
        return None   # pipelined / graph samples are batch averages: no per-iteration start


def nccl_timeline(summary: dict) -> list[tuple[int, int]] | None:
    """Per-iteration (first kernel start, last kernel end) on this rank's host clock from the plugin."""
    rows = (summary or {}).get("per_iteration") or []
    spans = [(r.get("kernel_start_ns"), r.get("kernel_end_ns")) for r in rows]
    if not spans or any(s is None or e is None for s, e in spans):
        return None
    return spans


def case_skew(spans_ns: list[list[tuple[int, int]]]) -> dict:
    """From each rank's per-iteration (start, end) on one clock: skew_us (median of latest start -
    earliest start), late_rank (most often the largest own gap), late_share, late_gap_us."""
    n_iter = min((len(s) for s in spans_ns), default=0)
    out = {"skew_us": None, "late_rank": None, "late_share": None, "late_gap_us": None}
    if len(spans_ns) < 2 or n_iter == 0:
        return out
    skews = []
    for i in range(n_iter):
        col = [s[i][0] for s in spans_ns]
        skews.append((max(col) - min(col)) / 1e3)
    out["skew_us"] = statistics.median(skews)
    if n_iter < 2:
        return out
    late, gaps = Counter(), {r: [] for r in range(len(spans_ns))}
    for i in range(1, n_iter):
        own = [s[i][0] - s[i - 1][1] for s in spans_ns]   # each rank's own clock: offsets cancel
        for r, g in enumerate(own):
            gaps[r].append(g / 1e3)
        late[own.index(max(own))] += 1
    rank, count = late.most_common(1)[0]
    out.update(late_rank=rank, late_share=count / (n_iter - 1), late_gap_us=statistics.median(gaps[rank]))
    return out


LATE_MIN_GAP_US = 20.0   # a rank's own delay below this is noise (a wake-up), not a straggler


def late_findings(results, min_share: float = 0.5, min_gap_us: float = LATE_MIN_GAP_US):
    """Ranks (and hosts) late in most multi-rank Cases.

    A rank is late in a Case when it was the late one in most of its iterations
    (``late_share`` >= 0.5) by a median own delay of at least ``min_gap_us``; it is
    flagged when that holds in at least ``min_share`` of the ok multi-rank Cases with
    a timeline. Returns a DataFrame: level, name, cases, late_cases, share,
    median_gap_us, flagged."""
    import pandas as pd

    need = {"late_rank", "late_share", "late_gap_us", "world_size"}
    if results.empty or not need <= set(results.columns):
        return pd.DataFrame()
    num = lambda c: pd.to_numeric(results[c], errors="coerce")  # noqa: E731
    base = results[(num("world_size") > 1) & num("late_rank").notna()]
    if "status" in base.columns:
        base = base[base["status"] == "ok"]
    if base.empty:
        return pd.DataFrame()
    share, gap = pd.to_numeric(base["late_share"], errors="coerce"), pd.to_numeric(base["late_gap_us"], errors="coerce")
    late = base[(share >= 0.5) & (gap >= min_gap_us)]
    levels = [("rank", late["late_rank"].astype(int).astype(str))]
    multi_node = "num_nodes" in base.columns and pd.to_numeric(base["num_nodes"], errors="coerce").max() > 1
    if "late_host" in base.columns and multi_node:
        levels.append(("host", late["late_host"].astype(str)))
    recs = []
    for level, names in levels:
        for name, count in names.value_counts().items():
            rows = late[names == name]
            recs.append({"level": level, "name": f"{level} {name}", "cases": len(base), "late_cases": int(count),
                         "share": round(count / len(base), 2),
                         "median_gap_us": round(float(pd.to_numeric(rows["late_gap_us"]).median()), 1),
                         "flagged": count / len(base) >= min_share})
    return pd.DataFrame(recs)
