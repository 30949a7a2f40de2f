"""Profiling (docs/profiling.md): where the time of a Case goes, per rank, per collective, per channel.

- ``nvtx``: NVTX ranges (domain "commbench") around every Case and timed batch, always on.
- ``torch_trace``: a torch.profiler (Kineto) trace of a few timed iterations (``--profile torch``).
- ``plugin_build``, ``nccl_plugin``, ``nccl_records``: our NCCL profiler plugin (``--profile nccl``):
  build, per-Case capture in the ranks, and the records summarised into row columns.
- ``clock``, ``skew``: rank clocks aligned over MPI; per-iteration start/end on one clock,
  ``skew_us`` and ``late_rank``.
- ``chrome_trace``, ``timeline``: `commbench trace` (Chrome-trace JSON of all ranks) and the
  data of the report's per-rank timelines (the report draws them; profile imports no analysis).

What profiling stores in a run folder (timeline.csv, traces/cases.jsonl) is written and read
through ``commbench.runfolder.timeline_files``.
"""
