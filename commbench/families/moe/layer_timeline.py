"""The MoE layer read from the GPU's own timeline: each kernel or copy of a profiled layer step belongs to
the region whose host code launched it (dispatch, experts or combine of micro-batch i), and the
row's columns come from those intervals, step by step.

Regions, not kernel names, decide: the index_select that packs a dispatch and the index_add that
sums a combine are the layer's communication work as much as the NCCL, DeepEP or commbench
all2all kernels are, while the experts' pack, GEMMs and unpack are its compute. The step windows
and the split (compute, comm, exposed, overlap, idle) are the measure floor's
(measure/gpu_timeline.py, measure/step_split.py); this module adds, per step:

- dispatch_us, expert_us, combine_us: the time the GPU spent in each part (union of its
  intervals over the micro-batches);
- two_batch only: tbo_hidden_us, each micro-batch's communication that ran under the *other*
  micro-batch's experts, summed, and tbo_gain_pct = 100 tbo_hidden / comm.
"""
from __future__ import annotations

from ...measure import step_split as ss
from ...measure.gpu_timeline import rebase, steps_from_trace

PREFIX = "commbench.moe."
PARTS = ("dispatch", "experts", "combine")
COMM_PARTS = ("dispatch", "combine")
PART_COLUMNS = {"dispatch": "dispatch_us", "experts": "expert_us", "combine": "combine_us"}
LAYER_COLUMNS = ("dispatch_us", "expert_us", "combine_us", "tbo_hidden_us")


def region_label(part: str, micro_batch: int) -> str:
    """The host annotation around one part of one micro-batch (torch.profiler.record_function)."""
    return f"{PREFIX}{part}.{micro_batch}"


def parse_region(label: str) -> tuple[str, int] | None:
    """(part, micro-batch) of a region label, None for any other annotation."""
    if not label.startswith(PREFIX):
        return None
    part, _, mb = label[len(PREFIX):].partition(".")
    return (part, int(mb)) if part in PARTS and mb.isdigit() else None


def layer_timeline(events: list[dict]) -> tuple[list, list[dict]]:
    """(step windows, intervals) of the layer's steps from a torch.profiler trace's events, the
    first window at 0 us. Each interval launched in a region carries ``region`` ("dispatch.0",
    the innermost region holding its launch: the measure floor's steps_from_trace) and the kind
    its region gives (dispatch, combine: comm; experts: compute); any other keeps the measure
    floor's kind by name."""
    windows, intervals = steps_from_trace(events, region_prefix=PREFIX)
    out = []
    for iv in intervals:
        found = parse_region(PREFIX + iv["region"]) if "region" in iv else None
        if found is None:
            iv = {k: v for k, v in iv.items() if k != "region"}
        else:
            iv = {**iv, "kind": "comm" if found[0] in COMM_PARTS else "compute"}
        out.append(iv)
    return rebase(windows, out)


def _in(intervals: list[dict], start_us: float, end_us: float, pred) -> list[tuple[float, float]]:
    return ss.clip([(iv["start_us"], iv["end_us"]) for iv in intervals if pred(iv.get("region", ""))],
                   start_us, end_us)


def step_columns(intervals: list[dict], start_us: float, end_us: float, two_batch: bool) -> dict:
    """The floor's split of one window plus the layer's parts and, for two_batch, the hidden
    communication (see the module's docstring)."""
    cols = ss.split_window(intervals, start_us, end_us)
    for part, col in PART_COLUMNS.items():
        cols[col] = ss.length(_in(intervals, start_us, end_us, lambda r, p=part: r.partition(".")[0] == p))
    if two_batch:
        def of(m, parts, mine):
            return _in(intervals, start_us, end_us, lambda r: r.partition(".")[0] in parts
                       and (r.partition(".")[2] == m) == mine)
        hidden = 0.0
        for m in sorted({iv["region"].partition(".")[2] for iv in intervals if iv.get("region")}):
            comm = of(m, COMM_PARTS, True)   # this micro-batch's comm under the others' experts
            hidden += ss.length(comm) - ss.length(ss.subtract(comm, of(m, ("experts",), False)))
        cols["tbo_hidden_us"] = hidden
    return cols


def rank_columns(windows: list, intervals: list[dict], two_batch: bool) -> dict:
    """One rank's columns: the floor's mean step, and the means of the layer's parts (additive,
    like the split's), tbo_gain_pct from the means."""
    per_step = [step_columns(intervals, s, e, two_batch) for s, e in windows]
    if not per_step:
        raise ValueError("no layer step on the timeline")
    cols = ss.mean_split(per_step)
    for col in LAYER_COLUMNS:
        vals = [c[col] for c in per_step if col in c]
        if vals:
            cols[col] = sum(vals) / len(vals)
    if two_batch:
        comm = cols["comm_us"]
        cols["tbo_gain_pct"] = 100.0 * cols["tbo_hidden_us"] / comm if comm > 0 else None
    return cols
