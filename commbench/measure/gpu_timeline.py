"""The GPU's own timeline of a batch of steps: torch.profiler's CUDA activity (CUPTI kernel, memcpy and
memset records, with stream and nanosecond stamps), classified and cut into step windows.

Steps are marked on the host with ``record_function(STEP_PREFIX + i)``; each GPU record is tied to
the host call that launched it (its correlation id), and step i's window runs from the start of
the first GPU record launched inside step i to the start of step i+1's first (the last step ends
with the last record launched in it). Work still running from a step when the next begins (a
collective left in flight) counts in the window it runs in.

Classification (``classify``): NCCL kernels and commbench's and DeepEP's communication kernels
(``COMM_KERNELS``, plus names a Case adds) and peer copies are ``comm``; other memcpy/memset
records ``copy``; every other kernel ``compute``.

Regions (``steps_from_trace(..., region_prefix=...)``): a record launched inside host annotations
named ``region_prefix + label`` carries ``region`` = the label of the innermost one (a family's
parts of a step, e.g. the MoE layer's dispatch / experts / combine).
"""
from __future__ import annotations

import json
import re
import tempfile
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

STEP_PREFIX = "commbench.step."
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
# communication kernels by name: NCCL's, DeepEP's, NVSHMEM's, and commbench's own (kernels/*.cu)
COMM_KERNELS = (r"nccl(Dev)?Kernel", r"deep_ep::", r"nvshmem", r"\bll_dispatch\b", r"\bll_combine\b",
                r"\bnormal_dispatch\b", r"\bnormal_combine\b", r"\bone_shot_kernel\b",
                r"\btwo_shot_kernel\b", r"\bk_coll\b", r"\bk_put_signal\b", r"\bk_rma_bw\b")


def _pattern(extra: Iterable[str] = ()) -> re.Pattern:
    return re.compile("|".join([*COMM_KERNELS, *(re.escape(n) for n in extra)]))


def classify(name: str, cat: str, comm_names: Iterable[str] | re.Pattern = ()) -> str:
    """``comm``, ``copy`` or ``compute`` for one GPU record (Kineto category and name)."""
    if cat == "gpu_memcpy":
        return "comm" if "PtoP" in name else "copy"
    if cat == "gpu_memset":
        return "copy"
    pattern = comm_names if isinstance(comm_names, re.Pattern) else _pattern(comm_names)
    return "comm" if pattern.search(name) else "compute"


def profiler_running() -> bool:
    """Whether a torch profiler is already recording (``--profile torch``): a second one would end
    its session."""
    import torch

    return bool(torch._C._autograd._profiler_enabled())


def _annotations(events: Sequence[dict], prefix: str) -> list[tuple[float, float, str]]:
    """(start_us, end_us, name after the prefix) of the host annotations named prefix..., by start."""
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e["name"])[len(prefix):])
                  for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                  and str(e.get("name", "")).startswith(prefix))


def innermost(spans: Sequence[tuple[float, float, str]], times: Sequence[float | None]) -> list[str | None]:
    """For each time, the label of the innermost span (start, end, label) holding it, None when none
    does. Spans nest (host annotations of one thread); one sweep over both, sorted."""
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    out: list[str | None] = [None] * len(times)
    stack: list[tuple[float, float, str]] = []
    k = 0
    for i in sorted((i for i, t in enumerate(times) if t is not None), key=lambda i: times[i]):
        t = times[i]
        while k < len(spans) and spans[k][0] <= t:
            while stack and stack[-1][1] < spans[k][0]:
                stack.pop()
            stack.append(spans[k])
            k += 1
        while stack and stack[-1][1] < t:
            stack.pop()
        out[i] = stack[-1][2] if stack else None
    return out


def steps_from_trace(events: Sequence[dict], comm_names: Iterable[str] = (),
                     region_prefix: str | None = None) -> tuple[list, list[dict]]:
    """(step windows [(start_us, end_us)], classified intervals) from Kineto trace events.

    Intervals are every GPU record that ends after the first window starts and starts before the
    last ends, stamped on the trace's own clock (microseconds); with ``region_prefix``, each one
    launched in such a region carries ``region`` (see the module's docstring)."""
    marks = [(s, e, int(n)) for s, e, n in _annotations(events, STEP_PREFIX) if n.isdigit()]
    launch_ts = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in (e.get("args") or {}):
            launch_ts[e["args"]["correlation"]] = float(e["ts"])
    pattern = _pattern(comm_names)
    gpu = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATS:
            continue
        args = e.get("args") or {}
        name, start = str(e.get("name", "")), float(e["ts"])
        gpu.append({"kind": classify(name, e["cat"], pattern), "stream": args.get("stream"), "start_us": start,
                    "end_us": start + float(e.get("dur", 0)), "name": name,
                    "_launch": launch_ts.get(args.get("correlation"))})
    starts = [m[0] for m in marks]
    first: dict[int, float] = {}
    last_end: dict[int, float] = {}
    for iv in gpu:
        t = iv["_launch"]
        if t is None:
            continue
        i = bisect_right(starts, t) - 1
        if i < 0 or t > marks[i][1]:
            continue
        first[i] = min(first.get(i, iv["start_us"]), iv["start_us"])
        last_end[i] = max(last_end.get(i, iv["end_us"]), iv["end_us"])
    if region_prefix is not None:
        labels = innermost(_annotations(events, region_prefix), [iv["_launch"] for iv in gpu])
        for iv, label in zip(gpu, labels):
            if label is not None:
                iv["region"] = label
    order = sorted(first)
    for k in range(1, len(order)):   # windows follow one another even if a step's first record ran early
        first[order[k]] = max(first[order[k]], first[order[k - 1]])
    windows = [(first[i], max(first[i], first[order[k + 1]] if k + 1 < len(order) else last_end[i]))
               for k, i in enumerate(order)]
    if not windows:
        return [], []
    lo, hi = windows[0][0], windows[-1][1]
    intervals = [{k: v for k, v in iv.items() if k != "_launch"} for iv in gpu
                 if iv["end_us"] > lo and iv["start_us"] < hi]
    intervals.sort(key=lambda iv: (iv["start_us"], iv["end_us"]))
    return windows, intervals


def rebase(windows: Sequence, intervals: Sequence[dict]) -> tuple[list, list[dict]]:
    """Windows and intervals moved so the first window starts at 0 (the file's clock)."""
    if not windows:
        return [], []
    base = windows[0][0]
    return ([(s - base, e - base) for s, e in windows],
            [{**iv, "start_us": iv["start_us"] - base, "end_us": iv["end_us"] - base} for iv in intervals])


class GpuTimeline:
    """Records the GPU activity of a batch of steps: ``with tl.capture(): ... with tl.step(i): ...``,
    then ``tl.windows`` and ``tl.intervals`` (first window at 0 us). A profiler that fails leaves
    ``note`` set and no windows; the steps run all the same."""

    source = "cupti"

    def __init__(self, comm_names: Iterable[str] = ()):
        self.comm_names = tuple(comm_names)
        self.windows: list = []
        self.intervals: list[dict] = []
        self.note = ""
        self._prof = None

    @contextmanager
    def capture(self):
        try:
            from torch.profiler import ProfilerActivity, profile

            if profiler_running():
                # a second profiler would end the first one's session (--profile torch): leave it be
                raise RuntimeError("another torch profiler is running (--profile torch)")
            self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                 record_shapes=False, with_stack=False)
            self._prof.__enter__()
        except Exception as exc:  # noqa: BLE001 - the steps are measured anyway, without a timeline
            self._prof, self.note = None, f"torch profiler did not start: {type(exc).__name__}: {exc}"
        try:
            yield self
        finally:
            if self._prof is not None:
                self._finish()

    @contextmanager
    def step(self, i: int):
        from torch.profiler import record_function

        with record_function(f"{STEP_PREFIX}{i}"):
            yield

    def _finish(self) -> None:
        import torch

        prof, self._prof = self._prof, None
        try:
            if torch.cuda.is_available():
                torch.cuda.synchronize()   # every record of the steps is in before the profiler stops
        finally:
            stopped = _stop(prof)
        if stopped:
            self.note = stopped
            return
        try:
            with tempfile.TemporaryDirectory(prefix="commbench-timeline-") as tmp:
                path = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(path))
                events = json.loads(path.read_text()).get("traceEvents", [])
            windows, intervals = steps_from_trace(events, self.comm_names)
            self.windows, self.intervals = rebase(windows, intervals)
            if not self.windows:
                cats = {}
                for e in events:
                    cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
                seen = ", ".join(f"{c} {cats.get(c, 0)}" for c in (*GPU_CATS, *LAUNCH_CATS, "user_annotation"))
                self.note = f"the profiler saw no GPU work launched inside the steps ({seen})"
        except Exception as exc:  # noqa: BLE001 - a lost timeline must not lose the row
            self.note = f"timeline not read: {type(exc).__name__}: {exc}"


def _stop(prof) -> str:
    try:
        prof.__exit__(None, None, None)
        return ""
    except Exception as exc:  # noqa: BLE001 - a lost timeline must not lose the row
        return f"the profiler did not stop: {type(exc).__name__}: {exc}"
