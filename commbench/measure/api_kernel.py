"""API-level and kernel-only time of one op, beside the timed batch's ``time_us``.

A family asks for them with ``CaseState.api_calls`` (the MoE family: every backend, its
``api_calls`` parameter). After the timed batch the runner makes that many more calls, one at a
time, each as a user's code would make it:

- ``api_us``: the host clock around one call and a wait for the device (barrier on every rank,
  ``perf_counter``, the call, ``torch.cuda.synchronize``, ``perf_counter``): Python, the launches,
  host-side waits inside the call (DeepEP's normal dispatch waits on the CPU for the receive
  counts) and the synchronisation are all in it. Hybrid-EP's and UCCL-EP's "API" numbers.
- ``kernel_only_us``: the device time of what that call launched (kernels, copies, memsets), from
  the torch profiler (CUPTI): the device activity correlated with launches made inside the
  call's own profiler range, summed. Gaps between kernels, launch latency and host waits are
  not in it. Their "kernel only" numbers.

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
    """The device time attributed to each call's range; the calls are made whatever the profiler
    does (they may be collectives the other ranks are in)."""
    import torch

    prof, note = None, ""
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False)
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - api_us stands without it
        prof, note = None, f"kernel_only_us: the torch profiler did not start: {type(exc).__name__}: {exc}"
    from torch.profiler import record_function

    with torch.cuda.stream(stream):
        for i in range(calls):
            torch.cuda.synchronize()
            barrier()
            with record_function(f"{RANGE_PREFIX}{i}"):
                run()
            torch.cuda.synchronize()
    if prof is None:
        return None, note
    try:
        prof.__exit__(None, None, None)
        per_call = attributed_us(prof.events(), calls)
    except Exception as exc:  # noqa: BLE001
        return None, f"kernel_only_us: the profile could not be read: {type(exc).__name__}: {exc}"
    if not any(per_call):
        return None, "kernel_only_us: the profiler attributed no device activity to the calls"
    return per_call, ""


def attributed_us(events, calls: int) -> list[float]:
    """Per call i, the device time (us) the profiler attributes to the host range RANGE_PREFIX+i:
    the range's ``device_time_total`` (its own and its child ops' correlated device activity)."""
    out = [0.0] * calls
    for ev in events:
        name = getattr(ev, "name", "")
        if not name.startswith(RANGE_PREFIX) or _on_device(ev):
            continue
        try:
            i = int(name[len(RANGE_PREFIX):])
        except ValueError:
            continue
        if 0 <= i < calls:
            out[i] = max(out[i], float(_device_total(ev)))
    return out


def _on_device(ev) -> bool:
    """The device-side copy of a user range (``gpu_user_annotation``) is not the host range."""
    kind = getattr(ev, "device_type", None)
    return kind is not None and getattr(kind, "name", str(kind)).upper() not in ("CPU",)


def _device_total(ev) -> float:
    for attr in ("device_time_total", "cuda_time_total"):   # torch >= 2.4 names it device_*
        value = getattr(ev, attr, None)
        if value is not None:
            return value
    return 0.0


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
