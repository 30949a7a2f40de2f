"""One profiled batch of the MoE layer: torch.profiler (CUPTI) records the GPU's kernels and copies
while host annotations mark each step (the measure floor's step marks) and each region, and
layer_timeline turns them into intervals.

The batch runs after the timed one, eagerly (a CUDA graph's kernels would all share the graph
launch, with no region to tell them apart), so the profiler's cost never lands in ``time_us``; it
runs at most ``step_split.PROFILED_STEPS`` steps. Every rank runs it, profiler or not: the
layer's collectives need all ranks.
"""
from __future__ import annotations

import json
import tempfile
from contextlib import nullcontext
from pathlib import Path

from ...measure import step_split
from ...measure.gpu_timeline import STEP_PREFIX, profiler_running
from . import layer_timeline as lt


def _events(prof) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="commbench-moe-") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text()).get("traceEvents", [])


def _start():
    """(a running profiler, "") or (None, why not)."""
    from torch.profiler import ProfilerActivity, profile

    if profiler_running():   # a second profiler would end the first one's session (--profile torch)
        return None, "torch profiler did not start: another torch profiler is running (--profile torch)"
    try:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False)
        prof.__enter__()
        return prof, ""
    except Exception as exc:  # noqa: BLE001 - the batch still runs: the other ranks need it
        return None, f"torch profiler did not start: {type(exc).__name__}: {exc}"


def _stop(prof) -> str:
    """Stop the profiler; why it did not, else "" (never raises: an error of the batch itself
    stays the one reported)."""
    try:
        prof.__exit__(None, None, None)
        return ""
    except Exception as exc:  # noqa: BLE001 - a lost timeline must not lose the row
        return f"the profiler did not stop: {type(exc).__name__}: {exc}"


def profiled_steps(state, iters: int) -> tuple[list, list[dict], str]:
    """(step windows, intervals, "") of this rank's profiled batch of
    ``step_split.profiled_steps(iters)`` steps, or ([], [], why not). ``state`` is the LayerState:
    ``run`` enqueues one layer on the current stream, ``regions`` turns the region annotations on."""
    import torch
    from torch.profiler import record_function

    steps = step_split.profiled_steps(iters)
    prof, note = _start()
    state.regions = prof is not None
    try:
        state.stream.synchronize()
        state.world.barrier()
        with torch.cuda.stream(state.stream):
            for i in range(steps):
                with record_function(f"{STEP_PREFIX}{i}") if prof is not None else nullcontext():
                    state.run()
        state.stream.synchronize()
    finally:
        state.regions = False
        if prof is not None:
            note = _stop(prof)
    if prof is None or note:
        return [], [], note
    try:
        windows, intervals = lt.layer_timeline(_events(prof))
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return [], [], f"the layer's timeline could not be read: {type(exc).__name__}: {exc}"
    if len(windows) != steps:
        return [], [], f"the profiler saw {len(windows)} of {steps} layer steps"
    return windows, intervals, ""
