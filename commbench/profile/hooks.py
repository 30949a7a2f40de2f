"""What the runner calls to profile a Case: a few hooks, everything else lives in commbench.profile.

In every rank::

    launch = LaunchProfiling(world, run_dir)          # once per launch: clocks aligned over MPI
    prof = CaseProfiler(case, ctx, launch)            # per Case (also refreshes stale clocks)
    with prof.case_range():                           # NVTX range around the whole Case
        ... setup, warm-up ...
        run = prof.wrap(run)                          # arrival stamps (and an injected delay)
        with prof.timed_batch():                      # NVTX batch range, torch profiler, NCCL marks
            samples = <timing mode>(run, ...)
    report = prof.rank_report(samples, mode)          # picklable; gathered to rank 0

On rank 0: ``columns, timeline_rows, case_line = merge_reports(case, reports, launch.offsets())``;
the columns go into the row, the rest through :mod:`commbench.runfolder.timeline_files`.
"""
from __future__ import annotations

import os
from contextlib import ExitStack, contextmanager
from pathlib import Path

from . import nccl_plugin, nvtx, skew
from .clock import ClockOffset, Clocks
from .torch_trace import TorchCapture

MODES = ("torch", "nccl")


PROFILE_KEY = "profile.launch"   # ctx.cache: the launch's LaunchProfiling (clock offsets, run folder)

def case_profile_mode(case) -> str:
    """The Case's profile mode ("" when not profiled)."""
    return getattr(case, "profile", "") or ""


class LaunchProfiling:
    """Per launch and rank: the run folder and the rank clocks' offsets (aligned at start)."""

    def __init__(self, world, run_dir: Path | None):
        self.world = world
        self.run_dir = Path(run_dir) if run_dir else None
        self.clocks = Clocks(world)

    def offsets(self) -> list[ClockOffset]:
        return self.clocks.offsets


class CaseProfiler:
    def __init__(self, case, ctx, launch: LaunchProfiling | None):
        self.case, self.world = case, ctx.world
        self.mode = case_profile_mode(case)
        self.arrivals = skew.Arrivals(ctx.world.rank)
        self.torch = self.nccl = self.nccl_summary = None
        run_dir = launch.run_dir if launch else None
        if self.mode == "torch" and run_dir is not None:
            self.torch = TorchCapture(run_dir, case.case_id, ctx.world.rank, ctx.device,
                                      f"commbench timed x{case.iters} {case.bench} {case.op} case_id={case.case_id}")
        elif self.mode == "nccl":
            self.nccl = nccl_plugin.NcclCapture(case.case_id, case.iters)
        if launch is not None:
            launch.clocks.refresh_if_stale()

    def case_range(self):
        return nvtx.case_range(self.case)

    def wrap(self, run):
        return self.arrivals.wrap(run)

    @contextmanager
    def timed_batch(self):
        with ExitStack() as stack:
            stack.enter_context(nvtx.batch_range(self.case, self.case.iters))
            if self.torch is not None:
                stack.enter_context(self.torch.batch())
            if self.nccl is not None:
                self.nccl.begin()
            yield
            if self.nccl is not None:
                # the end mark goes right after the timed ops (the timers synced their stream), before
                # the untimed check's ops: those would land between the marks as an extra iteration
                self.nccl_summary = self.nccl.end()

    def rank_report(self, samples_us: list[float], mode: str) -> dict:
        """This rank's timeline and profile results for rank 0 (after the batch's stream was synced).
        Never raises: a profile that fails leaves a note, the measurement stays."""
        try:
            return self._report(samples_us, mode)
        except Exception as exc:  # noqa: BLE001
            return {"rank": self.world.rank, "host": self.world.hostname, "pid": os.getpid(), "timeline": None,
                    "source": "", "error": f"rank {self.world.rank}: {type(exc).__name__}: {exc}"}

    def _report(self, samples_us: list[float], mode: str) -> dict:
        line = self.arrivals.timeline(mode, list(samples_us or []))
        report = {"rank": self.world.rank, "host": self.world.hostname, "pid": os.getpid(),
                  "timeline": line[0] if line else None, "source": line[1] if line else ""}
        if self.nccl is not None:
            report["nccl"] = self.nccl_summary if self.nccl_summary is not None else self.nccl.end()
            spans = skew.nccl_timeline(report["nccl"])
            if spans and len(spans) == len(samples_us or []):
                report["timeline"], report["source"] = spans, "nccl-kernel"
        if self.torch is not None:
            report["torch"] = self.torch.result()
        return report


def merge_reports(case, reports: list[dict], offsets: list[ClockOffset]) -> tuple[dict, list[dict], dict]:
    """Rank 0: (row columns, timeline rows, traces/cases.jsonl line) from every rank's report."""
    mode = case_profile_mode(case)
    cols: dict = {"profiled": mode}
    notes = []
    world_size = len(reports)
    by_rank = sorted(reports, key=lambda r: r["rank"])
    off = {o.rank: o for o in offsets}
    rows, t0 = [], None
    # (timelines go on the common clock only with every rank's offset: a rank measured outside a
    # launch has none, and gets no skew columns rather than a KeyError)
    if (world_size > 1 and all(r.get("timeline") and r["rank"] in off for r in by_rank)
            and len({r["source"] for r in by_rank}) == 1):
        common = [[(off[r["rank"]].to_common(s), off[r["rank"]].to_common(e)) for s, e in r["timeline"]]
                  for r in by_rank]
        t0 = min(s for spans in common for s, _ in spans)
        result = skew.case_skew(common)
        cols.update(result)
        late = result.get("late_rank")
        cols["late_host"] = by_rank[late]["host"] if late is not None else None
        cols["skew_source"] = by_rank[0]["source"]
        for r, spans in zip(by_rank, common):
            kernels = [it.get("kernel_us") for it in ((r.get("nccl") or {}).get("per_iteration") or [])]
            rows += [{"case_id": case.case_id, "rank": r["rank"], "host": r["host"], "iteration": i,
                      "start_us": (s - t0) / 1e3, "end_us": (e - t0) / 1e3, "source": r["source"],
                      "kernel_us": kernels[i] if i < len(kernels) else None}
                     for i, (s, e) in enumerate(spans)]
    if mode == "nccl":
        cols.update(nccl_plugin.case_columns([r.get("nccl") or {} for r in by_rank], world_size))
        notes.append(cols.pop("profile_note", ""))
    if mode == "torch":
        torch_results = [r.get("torch") or {} for r in by_rank]
        cols["trace"] = torch_results[0].get("trace", "") if torch_results else ""
        notes += [t["note"] for t in torch_results if t.get("note")][:1]
    notes += [r["error"] for r in by_rank if r.get("error")][:1]
    note = "; ".join(n for n in notes if n)
    if note:
        cols["profile_note"] = note
    case_line = {"case_id": case.case_id, "profiled": mode, "t0_ns": t0,
                 "ranks": [{"rank": r["rank"], "host": r["host"], "pid": r["pid"],
                            "offset_ns": off[r["rank"]].offset_ns if r["rank"] in off else None,
                            "clock_error_ns": off[r["rank"]].error_ns if r["rank"] in off else None,
                            "source": r["source"]} for r in by_rank]}
    return cols, rows, case_line
