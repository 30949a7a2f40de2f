"""API-level and kernel-only time of one op, beside the timed batch's ``time_us``.

A family asks for them with ``CaseState.api_calls`` (the MoE family: every backend, its
``api_calls`` parameter). After the timed batch the runner makes that many more calls, one at a
time, each as a user's code would make it:

- ``api_us``: the host clock around one call and a wait for the device (barrier on every rank,
  ``perf_counter``, the call, ``torch.cuda.synchronize``, ``perf_counter``): Python, the launches,
  host-side waits inside the call (DeepEP's normal dispatch waits on the CPU for the receive
  counts) and the synchronisation are all in it. Hybrid-EP's and UCCL-EP's "API" numbers.
- ``kernel_only_us``: the device time of what that call launched (kernels, copies, memsets), from
  the torch profiler (CUPTI): the device activity that starts between the call's profiler range
  and the next call's (each call ends with a synchronize, so nothing of one call runs in the
  next one's window), as the union of its intervals (kernels that overlap on two streams count
  once). Launches from native code (ctypes, DeepEP's and UCCL-EP's runtimes, NCCL, Triton) are in
  it: they need not be owned by a torch op. Gaps between kernels, launch latency and host waits
  are not. Their "kernel only" numbers.

Per call the slowest rank counts (the ranks start each call together); the row holds the median
over calls (``api_calls`` of them). A profiler that cannot start or that attributes no device
time leaves ``kernel_only_us`` empty and says why in ``api_note``; ``api_us`` is measured anyway.
The profiled calls are not the timed batch: ``time_us`` carries no profiler cost.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

RANGE_PREFIX = "commbench.api_call."
MAX_API_CALLS = 1000


def for_state(fam, state, world) -> dict:
    """The runner's call after the timed batch: the state's ``api_calls`` calls of ``fam.run``, or {}
    where it asks for none (0), runs on the host (no stream) or times itself (``measure``)."""
    if not state.api_calls or state.stream is None or state.measure is not None:
        return {}
    return measure(lambda: fam.run(state), state.stream, state.api_calls, world.barrier)


def measure(run: Callable[[], None], stream, calls: int, barrier: Callable[[], None]) -> dict:
    """This rank's per-call lists: {"api_us": [...], "kernel_only_us": [...] or None, "note": str}.
    Every rank must call it with the same ``calls`` (each call may be a collective)."""
    if calls <= 0:
        return {}
    api = _api_calls(run, stream, calls, barrier)
    kernels, note = _kernel_calls(run, stream, calls, barrier)
    return {"api_us": api, "kernel_only_us": kernels, "note": note}


def _api_calls(run, stream, calls: int, barrier) -> list[float]:
    import torch

    out = []
    with torch.cuda.stream(stream):
        for _ in range(calls):
            torch.cuda.synchronize()
            barrier()
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def _kernel_calls(run, stream, calls: int, barrier) -> tuple[list[float] | None, str]:
    """The device time in each call's window; the calls are made whatever the profiler does (they
    may be collectives the other ranks are in), and the profiler is stopped whatever they do."""
    import torch

    prof, note = None, ""
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False)
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - api_us stands without it
        prof, note = None, f"kernel_only_us: the torch profiler did not start: {type(exc).__name__}: {exc}"
    from torch.profiler import record_function

    try:
        with torch.cuda.stream(stream):
            for i in range(calls):
                torch.cuda.synchronize()
                barrier()
                with record_function(f"{RANGE_PREFIX}{i}"):
                    run()
                torch.cuda.synchronize()
    finally:
        if prof is not None:   # never left running into the next Case's timed batch
            try:
                prof.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001
                prof, note = None, f"kernel_only_us: the profiler did not stop: {type(exc).__name__}: {exc}"
    if prof is None:
        return None, note
    try:
        per_call = attributed_us(prof.events(), calls)
    except Exception as exc:  # noqa: BLE001
        return None, f"kernel_only_us: the profile could not be read: {type(exc).__name__}: {exc}"
    if not any(per_call):
        return None, "kernel_only_us: the profiler saw no device activity in the calls"
    return per_call, ""


def attributed_us(events, calls: int) -> list[float]:
    """Per call i, the union (us) of the device intervals that start in its window: from the host
    range RANGE_PREFIX+i to the next call's range (the last: to the end). User annotations on the
    device (the ranges' own copies) are not activity."""
    events = list(events)
    starts: dict[int, float] = {}
    host_names = set()
    for ev in events:
        if _on_device(ev):
            continue
        host_names.add(ev.name)
        i = _call_index(ev.name, calls)
        if i is not None:
            starts[i] = min(starts.get(i, float("inf")), ev.time_range.start)
    device = sorted((ev.time_range.start, ev.time_range.end) for ev in events
                    if _on_device(ev) and not getattr(ev, "is_user_annotation", False)
                    and ev.name not in host_names and not ev.name.startswith(RANGE_PREFIX))
    order = sorted(starts, key=starts.get)
    out = [0.0] * calls
    for k, i in enumerate(order):
        lo = starts[i]
        hi = starts[order[k + 1]] if k + 1 < len(order) else float("inf")
        out[i] = _union_us([iv for iv in device if lo <= iv[0] < hi])
    return out


def _call_index(name: str, calls: int) -> int | None:
    if not name.startswith(RANGE_PREFIX):
        return None
    try:
        i = int(name[len(RANGE_PREFIX):])
    except ValueError:
        return None
    return i if 0 <= i < calls else None


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by sorted (start, end) intervals, overlaps once."""
    total, cur_lo, cur_hi = 0.0, None, None
    for lo, hi in intervals:
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return float(total)


def _on_device(ev) -> bool:
    """An event the device ran (a kernel, a copy, a device-side annotation), not a host one."""
    kind = getattr(ev, "device_type", None)
    return kind is not None and getattr(kind, "name", str(kind)).upper() not in ("CPU",)


def columns(per_rank: list[dict]) -> dict:
    """Rank 0: the row's api_us and kernel_only_us (median over calls of the slowest rank's) and
    api_note, from every rank's :func:`measure` result; {} when no rank measured."""
    measured = [r for r in per_rank if r]
    if not measured:
        return {}
    cols = {"api_us": _median_of_slowest([r["api_us"] for r in measured]), "kernel_only_us": None,
            "api_calls": len(measured[0]["api_us"])}
    kernels = [r.get("kernel_only_us") for r in measured]
    if all(k for k in kernels):
        cols["kernel_only_us"] = _median_of_slowest(kernels)
    notes = sorted({r.get("note") for r in measured if r.get("note")})
    if notes:
        cols["api_note"] = "; ".join(notes)
    return cols


def _median_of_slowest(lists: list[list[float]]) -> float | None:
    n = min(len(x) for x in lists)
    if n == 0:
        return None
    return statistics.median(max(x[i] for x in lists) for i in range(n))
