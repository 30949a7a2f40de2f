"""The per-Case state a family's ``setup`` returns: the one contract between families and the runner.

A family subclasses :class:`CaseState` with its own fields (buffers, communicators, launchers); the
runner reads only the fields declared here, never attributes by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(kw_only=True)
class CaseState:
    """What the runner needs to time, check and record one Case on this rank.

    - ``stream``: the torch.cuda.Stream the op runs on; the runner times with CUDA events on it.
      None means a CPU op, timed with the host clock.
    - ``native``: a ``measure.native_loop.NativeOp`` when the op can be enqueued from native code;
      the runner then runs warm-up and the timed batch there (Python entered once per batch).
    - ``measure``: for ops that time themselves (in-kernel clocks, proxy round trips): called as
      ``measure(warmup, iters)`` and returns this rank's per-iteration microseconds; the runner
      still aligns, reduces (slowest rank) and records them. ``timing_label`` names that clock.
    - ``extra``: extra result columns of this Case.
    - ``size_bytes`` / ``count``: the effective size and element count when they differ from the
      Case's (rounding to whole elements, token counts).
    - ``columns_from_time``: columns derived from the Case's reduced median ``time_us`` (rank 0),
      e.g. a command rate.
    - ``sample_columns``: per-iteration values on this rank (column -> list, one per timed
      iteration; a shorter list fills the first iterations) that samples.csv keeps beside
      ``time_us``, e.g. a training step's phases and its profiled steps' split.
    - ``timeline``: this rank's classified timeline of the profiled steps (a batch of its own,
      step_split.PROFILED_STEPS at most, unless the timeline is what a Case checks), ``{"source", "steps":
      [(start_us, end_us)], "intervals": [{kind, stream, start_us, end_us, name}]}``
      (measure/step_split.py); the runner stores it as timeline/<case_id>.r<rank>.json.
    - ``bitwise``: what a suite's ``check: bitwise`` needs (:class:`BitwiseHooks`); None: the family
      offers no output view, and its rows say so in ``bitwise_note`` (measure/bitwise.py).
    - ``api_calls``: calls made one at a time after the timed batch for ``api_us`` (host clock, the
      device waited for) and ``kernel_only_us`` (the profiler's device time) (measure/api_kernel.py);
      0: none.
    """

    stream: Any = None
    native: Any = None
    measure: Callable[[int, int], list[float]] | None = None
    timing_label: str | None = None
    extra: dict = field(default_factory=dict)
    size_bytes: int | None = None
    count: int | None = None
    columns_from_time: Callable[[float], dict] | None = None
    sample_columns: dict = field(default_factory=dict)
    timeline: dict | None = None
    bitwise: "BitwiseHooks | None" = None
    api_calls: int = 0


@dataclass(kw_only=True)
class BitwiseHooks:
    """What the bitwise repeatability check (``check: bitwise``, measure/bitwise.py) asks of a family.

    - ``repeat()``: restore every input as set-up wrote it (an in-place op overwrote it), reset the
      outputs the same way, run the op once and wait for it (the device idle, the outputs final).
      Every rank calls it together, once per repetition: it may be a collective.
    - ``outputs()``: the result buffer(s) ``repeat`` writes on this rank: torch tensors (on the
      device for GPU ops: they are compared there) or numpy arrays, one-dimensional and contiguous.
    - ``expected(index, start, stop)``: where the answer is known exactly, the values of output
      ``index`` at positions [start, stop) (any numeric array of that length; they are cast to the
      output's element type and compared bit for bit), or None where it is not known exactly.
      None (the field): no known answer on this rank; ``no_expected`` says why ("" when this rank
      has no result to know, as a non-root rank of reduce).
    """

    repeat: Callable[[], None]
    outputs: Callable[[], list]
    expected: Callable[[int, int, int], Any] | None = None
    no_expected: str = ""
