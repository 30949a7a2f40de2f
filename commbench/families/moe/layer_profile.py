"""One profiled batch of the MoE layer: torch.profiler (CUPTI) records the GPU's kernels and copies
while host annotations mark each step (the measure floor's step marks) and each region, and
layer_timeline turns them into intervals.

The batch runs after the timed one, eagerly (a CUDA graph's kernels would all share the graph
launch, with no region to tell them apart), so the profiler's cost never lands in ``time_us``.
Every rank runs it, profiler or not: the layer's collectives need all ranks.
"""
from __future__ import annotations

import json
import tempfile
from contextlib import nullcontext
from pathlib import Path

from ...measure.gpu_timeline import STEP_PREFIX
from . import layer_timeline as lt


def _events(prof) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="commbench-moe-") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text()).get("traceEvents", [])


def profiled_steps(state, iters: int) -> tuple[list, list[dict], str]:
    """(step windows, intervals, "") of this rank, or ([], [], why not). ``state`` is the
    LayerState: ``run`` enqueues one layer on the current stream, ``regions`` turns the region
    annotations on."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    prof, note = None, ""
    try:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False)
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - the batch still runs: the other ranks need it
        prof, note = None, f"torch profiler did not start: {type(exc).__name__}: {exc}"
    state.regions = prof is not None
    try:
        state.stream.synchronize()
        state.world.barrier()
        with torch.cuda.stream(state.stream):
            for i in range(iters):
                with record_function(f"{STEP_PREFIX}{i}") if prof is not None else nullcontext():
                    state.run()
        state.stream.synchronize()
    finally:
        state.regions = False
        if prof is not None:
            prof.__exit__(None, None, None)
    if prof is None:
        return [], [], note
    try:
        windows, intervals = lt.layer_timeline(_events(prof))
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return [], [], f"the layer's timeline could not be read: {type(exc).__name__}: {exc}"
    if len(windows) != iters:
        return [], [], f"the profiler saw {len(windows)} of {iters} layer steps"
    return windows, intervals, ""
