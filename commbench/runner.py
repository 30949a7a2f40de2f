"""The measurement protocol, run in every rank: set up, warm up, time, check, reduce, record.

Phases that can fail on one rank only (setup, timing, check) end with an
agreement over MPI, so every rank takes the same branch and none waits in a
collective that its peers have abandoned.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from . import metrics
from .comm.agree import run_on_every_rank
from .comm.context import RankContext
from .errors import SkipCase, StorageFull
from .families import get_family
from .families.base import Case
from . import safety
from .runfolder import step_timelines, timeline_files
from .profile.hooks import PROFILE_KEY, CaseProfiler, LaunchProfiling, merge_reports
from .runfolder import RunFolder, case_row
from .runfolder.writer import STORAGE_FULL_EXIT
from .world import World
from .measure import device as device_binding
from .measure import api_kernel, bitwise, memory, native_loop, step_split, timing
from .measure.state import CaseState


class _PhaseFailed(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def _outcome(exc: Exception) -> tuple[str, str]:
    """(status, reason) of a phase that raised on this rank: a SkipCase skips the Case, anything
    else fails it (its traceback goes to the launch log)."""
    if isinstance(exc, SkipCase):
        return "skipped", str(exc)
    traceback.print_exception(exc)
    return "failed", f"{type(exc).__name__}: {exc}"


def _agree(world: World, fn, undo=None):
    """Run fn on every rank; if any rank raised, every rank raises the same _PhaseFailed naming the
    first rank that did (comm/agree.py). ``undo(result)`` releases what fn built on a rank that
    succeeded while another failed."""
    result, err, outcomes = run_on_every_rank(world, fn, _outcome, undo)
    del err   # it is in the outcomes; its traceback would keep the failed phase's frames (and buffers)
    for rank, outcome in enumerate(outcomes):
        if outcome is not None:
            status, reason = outcome
            raise _PhaseFailed(status, f"rank {rank}: {reason}" if world.size > 1 else reason)
    return result


def bind_device(world: World, cases: list[Case]) -> device_binding.Binding:
    """The rank's GPU binding; ranks that share a GPU get their own NCCL host identity (a collective)."""
    return device_binding.bind(world, any(get_family(c.family).needs_gpu_for(c) for c in cases))


CPU_BACKENDS = ("gloo", "mpi")   # backends whose Cases run on host memory in any launch


def base_row(case: Case, world: World, log: str, ranks_per_gpu: int | None = None) -> dict:
    row = case_row(case, world_size=world.size, num_nodes=world.num_nodes,
                   ranks_per_node=world.local_size, log=log)
    if ranks_per_gpu is not None and case.backend not in CPU_BACKENDS:
        row["ranks_per_gpu"] = ranks_per_gpu   # > 1: a correctness run, its times are not speed
    return row


def _time(fam, case: Case, state: CaseState, world: World, prof: CaseProfiler) -> tuple[list[float], str]:
    if state.measure is not None:  # the op times itself (in-kernel clock, proxy round trips)
        with prof.timed_batch():
            samples = list(state.measure(case.warmup, case.iters))
        return samples, state.timing_label or "kernel"
    stream = state.stream
    mode = timing.mode_for(case.timing, stream is not None)
    if state.native is not None and mode in native_loop.TIMERS:
        handle = stream.cuda_stream
        stream.synchronize()
        native_loop.warm_up(state.native, handle, case.warmup)
        with prof.timed_batch():
            if mode == "events":   # host stamps put this rank's iterations on the common clock
                stamps: list[int] = []
                samples = native_loop.time_events(state.native, handle, case.iters, world.barrier, host_ns=stamps)
                prof.arrivals.record_native(stamps)
                return samples, mode
            return native_loop.TIMERS[mode](state.native, handle, case.iters, world.barrier), mode
    run = lambda: fam.run(state)  # noqa: E731
    timed = prof.wrap(run) if mode in ("host", "events") else run   # arrival stamps; never inside graphs
    if mode == "host":
        for _ in range(case.warmup):
            run()
        with prof.timed_batch():
            return timing.time_host(timed, case.iters, world.barrier), mode
    import torch

    with torch.cuda.stream(stream):
        for _ in range(case.warmup):
            run()
    stream.synchronize()
    with prof.timed_batch():
        return timing.TIMERS[mode](timed, stream, case.iters, world.barrier), mode


def _setup(fam, case: Case, ctx: RankContext) -> CaseState:
    state = fam.setup(case, ctx)
    if not isinstance(state, CaseState):
        raise TypeError(f"family {fam.name!r}: setup returned {type(state).__name__}; it must return a "
                        f"commbench.measure.state.CaseState (docs/families.md)")
    return state


def measure_case(case: Case, ctx: RankContext, log: str) -> tuple[dict, list[dict]]:
    """Measure one Case on every rank. Returns (row, samples) meaningful on rank 0."""
    world = ctx.world
    fam = get_family(case.family)
    row = base_row(case, world, log, ctx.ranks_per_gpu)
    reason = fam.unsupported(case)
    if reason:
        row.update(status="skipped", reason=reason)
        return row, []
    budget = _MemoryBudget(fam, case, ctx)
    row.update(budget.columns())
    if budget.skip_reason:
        row.update(status="skipped", reason=budget.skip_reason)
        return row, []
    state = None
    prof = CaseProfiler(case, ctx, ctx.cache.get(PROFILE_KEY))
    try:
        with prof.case_range():
            state = _agree(world, lambda: _setup(fam, case, ctx), undo=lambda st: _teardown(fam, st))
            budget.after_setup()
            tampered = _tampered(world, safety.active_kill_switches())
            if tampered:  # set-up loaded code (a library, a plugin) that changed the switches
                raise _PhaseFailed("failed", tampered)
            samples, mode = _agree(world, lambda: _time(fam, case, state, world, prof))
            calls = _agree(world, lambda: api_kernel.for_state(fam, state, world))   # api_us, kernel_only_us
            wrong_local = _agree(world, lambda: int(fam.check(state)))
            bits = (_agree(world, lambda: bitwise.local_pass(state.bitwise, case.bitwise_repeats, world.rank,
                                                             world.allgather)) if case.bitwise_repeats else None)
    except _PhaseFailed as exc:
        row.update(status=exc.status, reason=budget.explain(exc.reason))
        _teardown(fam, state, budget, failed=True)
        failed = exc.status == "failed"
        state = exc = None   # nothing of the Case stays referenced here before the release
        budget.release(failed)   # a failure's traceback cycles keep set-up's frames: gc.collect
        return row, []
    wrong = world.sum_int(wrong_local)
    row.update(budget.peak_column())
    report = prof.rank_report(samples, mode)
    # per-iteration columns beside time_us (a training step's phases): state.sample_columns
    gathered = world.comm.gather((world.rank, world.hostname, ctx.device, samples, report,
                                  dict(state.sample_columns), state.timeline, bits, calls), root=0)
    extra = dict(state.extra)
    if state.stream is not None and state.measure is None:  # which loop enqueued the timed ops
        extra.setdefault("timed_loop", "native" if state.native is not None else "python")
    row["size_bytes"] = state.size_bytes if state.size_bytes is not None else case.size_bytes
    row["count"] = state.count
    from_time = state.columns_from_time
    _teardown(fam, state, budget)
    if not world.is_root:
        return row, []
    return _root_row(case, ctx, fam, row, gathered, mode, wrong, extra, from_time)


def _root_row(case: Case, ctx: RankContext, fam, row: dict, gathered: list, mode: str, wrong: int,
              extra: dict, from_time) -> tuple[dict, list[dict]]:
    """Rank 0: the Case's row (statistics over the slowest rank per iteration, bandwidths, the
    profiler's and the family's columns, the check's verdicts) and its per-rank samples, from what
    every rank gathered (rank, host, device, times, profile report, sample columns, timeline, bits)."""
    world = ctx.world
    profiled = _profile_columns(case, [g[4] for g in gathered], ctx)
    per_iter = metrics.reduce_ranks([g[3] for g in gathered], case.param("rank_time", "max"))
    stats = metrics.summarize(per_iter)
    traffic = fam.traffic(case, world.size)
    algbw = metrics.gbps(traffic.algbw_bytes, stats["time_us"])
    row.update(stats, timing=mode, algbw_gbps=algbw, busbw_gbps=algbw * traffic.bus_factor,
               wrong=wrong, **extra)
    # what the profiler saw wins over a family's own guess (nccl_algo from the log); an empty
    # profile column never erases a family's value
    row.update({k: v for k, v in profiled.items() if v not in (None, "") or k not in row})
    if from_time is not None and row["time_us"]:
        row.update(from_time(row["time_us"]))
    if wrong:
        row.update(status="wrong", reason=f"{wrong} element(s) differ from the expected values")
    if case.bitwise_repeats:   # check: bitwise (measure/bitwise.py)
        bitwise.settle(row, case.bitwise_repeats, [g[7] for g in gathered], case.family)
    row.update(api_kernel.columns([g[8] for g in gathered]))
    _store_timelines(case, ctx, [(g[0], g[6]) for g in gathered], row)
    apply_split_invariants(row)
    sample_rows = [{"case_id": case.case_id, "rank": r, "host": h, "gpu": dev, "iteration": i,
                    "time_us": t, **{k: v[i] for k, v in cols.items() if i < len(v)}}
                   for r, h, dev, ts, _rep, cols, *_rest in gathered for i, t in enumerate(ts)]
    return row, sample_rows


def apply_split_invariants(row: dict) -> None:
    """An ok row whose step split breaks an invariant (measure/step_split.py) becomes wrong."""
    broken = step_split.invariant_problems(row)
    if broken and row.get("status") == "ok":
        row.update(status="wrong", reason="the step split breaks an invariant: " + "; ".join(broken))


def _store_timelines(case: Case, ctx: RankContext, timelines: list[tuple[int, dict | None]], row: dict) -> None:
    """Rank 0: each rank's classified step timeline as timeline/<case_id>.r<rank>.json; a
    timeline that cannot be written says so in timeline_note, the row stays."""
    launch = ctx.cache.get(PROFILE_KEY)
    if launch is None or launch.run_dir is None:
        return
    try:
        for rank, tl in timelines:
            if tl:
                step_timelines.write(launch.run_dir, case.case_id, rank, tl["source"], tl["steps"], tl["intervals"])
    except Exception as exc:  # noqa: BLE001 - nothing measured may be lost to a timeline file (a full
        # disk is then met, and handled, by the row's own write)
        traceback.print_exc()
        row["timeline_note"] = f"timeline not stored: {type(exc).__name__}: {exc}"


def _profile_columns(case: Case, reports: list[dict], ctx: RankContext) -> dict:
    """Rank 0: profiling's row columns; timeline and per-rank data go beside the rows. A profile
    that fails says so in profile_note and leaves the measured row as it is."""
    launch = ctx.cache.get(PROFILE_KEY)
    try:
        cols, timeline_rows, case_line = merge_reports(case, reports, launch.offsets() if launch else [])
        if launch is not None and launch.run_dir is not None:
            timeline_files.append_timeline(launch.run_dir, timeline_rows)
            timeline_files.append_case_line(launch.run_dir, case_line)
        return cols
    except Exception as exc:  # noqa: BLE001 - nothing measured may be lost to a profiling problem
        traceback.print_exc()
        return {"profiled": case.profile, "profile_note": f"profile summary failed: {exc}"}


def _teardown(fam, state, budget: "_MemoryBudget | None" = None, failed: bool = False) -> None:
    if state is not None:
        try:
            fam.teardown(state)
        except Exception:  # noqa: BLE001 - teardown problems must not lose the measured row
            traceback.print_exc()
        # A state's callables are usually closures over the state or its bound methods: a
        # reference cycle that only gc.collect frees, and the runner never calls it (below).
        # Cut them, so the state and its device buffers go by reference count now, not Cases
        # later (a 22 GB MoE layer per Case filled a 141 GB H200 in six Cases).
        state.measure = None
        state.columns_from_time = None
        state.native = None
        state.bitwise = None
    if budget is None:
        release_cached_memory()
    elif not failed:
        budget.release(failed=False)


release_cached_memory = memory.release_cached_memory


class _MemoryBudget:
    """One Case's device memory on this rank (measure/memory.py): the family's plan, the fit check
    before set-up (agreed by every rank), the peak the Case took, and the release after it."""

    def __init__(self, fam, case: Case, ctx: RankContext):
        self.world, self.plan, self.free, self.tracker, self.held = ctx.world, None, None, None, None
        self.skip_reason, mine = None, None
        if ctx.device.startswith("cuda") and case.backend not in CPU_BACKENDS and fam.needs_gpu_for(case):
            try:
                self.plan = fam.memory_bytes(case, ctx.world.size)
            except Exception:  # noqa: BLE001 - a plan that cannot be made leaves the Case unchecked, never unrun
                traceback.print_exc()
            memory.release_cached_memory()   # what the last Case cached is free for this one
            self.free = memory.device_free(ctx.device, ctx.ranks_per_gpu)
            self.held = memory.torch_held_bytes(ctx.device)
            if self.plan is not None and self.free is not None:
                mine = memory.fit_reason(self.plan, self.free, ctx.ranks_per_gpu)
        for rank, why in enumerate(self.world.allgather(mine)):   # every rank takes the same branch
            if why:
                self.skip_reason = f"rank {rank}: {why}" if self.world.size > 1 else why
                break
        if self.free is not None and not self.skip_reason:
            self.tracker = memory.CaseMemory(ctx.device, self.free, bool(ctx.ranks_per_gpu and ctx.ranks_per_gpu > 1))

    def columns(self) -> dict:
        out = {}
        if self.plan is not None:
            out["mem_estimate_bytes"] = self.plan.peak_bytes
        if self.free is not None:
            out["mem_free_bytes"] = self.free.share_bytes
        if self.held is not None:
            out["mem_torch_held_bytes"] = self.held
        return out

    def after_setup(self) -> None:
        if self.tracker is not None:
            self.tracker.after_setup()

    def peak_column(self) -> dict:
        """The most any rank took (a collective: every rank calls it)."""
        mine = self.tracker.peak_bytes() if self.tracker is not None else None
        peaks = [p for p in self.world.allgather(mine) if p is not None]
        return {"mem_peak_bytes": max(peaks)} if peaks else {}

    def explain(self, reason: str) -> str:
        """An out-of-memory failure's reason with the estimate beside it."""
        return reason + memory.oom_context(self.plan, self.free) if memory.is_out_of_memory(reason) else reason

    def release(self, failed: bool) -> None:
        if self.tracker is not None:
            self.tracker.release(failed)
        else:
            memory.release_cached_memory()


class Progress:
    """Rank 0 writes one JSON line per Case start/end; the parent process watches it."""

    def __init__(self, path: Path | None):
        self.path = path

    def emit(self, event: str, case: Case, **kw) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"event": event, "case_id": case.case_id, "t": time.time(), **kw}) + "\n")
            fh.flush()


def _tampered(world: World, seen: dict) -> str | None:
    """The first rank's reason to refuse measuring (kill switches differ from what the launch set)."""
    expected = safety.expected_switches()
    # Ranks are started only by commbench's launches, which always say what they set: a rank that
    # was told nothing (its environment lost the variable) cannot vouch for the switches.
    # seen: os.environ's switches; the C environment (what NCCL and NVSHMEM read) is asked too
    mine = (safety.switch_tamper(seen, expected) or safety.c_switch_problem(expected) if expected is not None else
            f"the launch's record of the multicast kill switches ({safety.EXPECTED_VAR}) is missing from "
            f"this rank's environment; refusing to measure")
    reasons = world.allgather(mine)
    for rank, reason in enumerate(reasons):
        if reason:
            return f"rank {rank}: {reason}" if world.size > 1 else reason
    return None


def _store(folder: RunFolder, row: dict, samples: list[dict], world: World) -> None:
    """Rank 0 stores a Case: its samples first, then the row that claims them (a crash between the
    two leaves samples without a row, which --resume drops, never an ok row without samples). A
    full disk ends the launch with STORAGE_FULL_EXIT: the parent stops the run."""
    try:
        if samples:
            folder.append_samples(samples)
        folder.append_row(row)
    except StorageFull as exc:
        print(f"commbench: {exc}", file=sys.stderr, flush=True)
        world.comm.Abort(STORAGE_FULL_EXIT)


def run_cases(cases: list[Case], world: World, folder: RunFolder, log: str,
              progress: Progress | None = None, on_row=None, switches_at_start: dict | None = None,
              on_bound=None) -> None:
    """Run Cases in order on this rank; rank 0 stores each row as soon as it is measured.

    Before the first Case and after every Case's set-up, each rank compares the multicast kill
    switches it sees with what its launch set; any difference fails the Case unmeasured.
    ``on_bound(record)`` gets, on rank 0, how the ranks were bound to GPUs (for run.json)."""
    at_start = safety.active_kill_switches() if switches_at_start is None else switches_at_start
    refused = _tampered(world, at_start) or _tampered(world, safety.active_kill_switches())
    binding = device_binding.Binding("cpu") if refused else bind_device(world, cases)
    record = device_binding.sharing_record(world, binding)
    if on_bound is not None and world.is_root:
        on_bound(record)
    ctx = RankContext(world=world, device=binding.device, ranks_per_gpu=binding.ranks_per_gpu)
    ctx.cache[PROFILE_KEY] = LaunchProfiling(world, folder.path)   # rank clocks aligned over MPI
    progress = progress if (progress and world.is_root) else Progress(None)
    try:
        for case in cases:
            progress.emit("start", case)
            if refused:
                row, samples = base_row(case, world, log, ctx.ranks_per_gpu), []
                row.update(status="failed", reason=refused)
            else:
                row, samples = measure_case(case, ctx, log)
            if world.is_root:
                _store(folder, row, samples, world)
                if on_row:
                    on_row(row)
            progress.emit("done", case, status=row["status"])
    finally:
        for fn in reversed(ctx.closers):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best-effort cleanup
                traceback.print_exc()
