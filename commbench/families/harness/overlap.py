"""The known-answer step of the timeline measurement (op `overlap`): durations and overlap set by
construction, measured from the GPU's own records like a training step, and held to the answer.

Each step: on stream A a compute spin of `spin_compute_us` (C) cut in two at offset o; on stream
B, after an event recorded at o, a communication stand-in of `spin_comm_us` (K): a kernel the
Case names as its communication (kernels/harness_spin.cu; both spin on the GPU's nanosecond
timer, one thread each, so they run side by side at their set lengths). A waits for B before the
step ends. `placement` sets o:

- under: o = (C - K) / 2, the communication wholly inside the compute (needs K <= C):
  exposed 0, overlap 100%;
- half: o = C - K / 2, its first half under the compute: exposed K / 2, overlap 50% (needs
  K <= 2C);
- after: o = C, after the compute: exposed K, overlap 0%.

Expected comm K, compute C, step max(C, o + K), idle about 0. A quantity counts as wrong
when it misses its answer by more than 5% of K (comm, exposed), of C (compute), of the
expected step (step), or by 5 points (overlap); idle may be at most 5% of the step.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ...measure import step_split
from ...measure.state import CaseState

PLACEMENTS = ("under", "half", "after")
STANDIN = "commbench_comm_standin"
TOLERANCE = 0.05


def placement_problem(placement: str, compute_us: float, comm_us: float) -> str | None:
    """Why a placement cannot be built from these lengths (its offset would fall outside the compute)."""
    if placement == "under" and comm_us > compute_us:
        return "placement under needs spin_comm_us <= spin_compute_us"
    if placement == "half" and comm_us > 2 * compute_us:
        return "placement half needs spin_comm_us <= 2 x spin_compute_us"
    return None


def offset_us(placement: str, compute_us: float, comm_us: float) -> float:
    return {"under": (compute_us - comm_us) / 2, "half": compute_us - comm_us / 2,
            "after": compute_us}[placement]


def expected(placement: str, compute_us: float, comm_us: float) -> dict:
    """The split of one step by construction."""
    o = offset_us(placement, compute_us, comm_us)
    exposed = max(0.0, o + comm_us - compute_us)
    return {"step_us": max(compute_us, o + comm_us), "comm_us": comm_us, "compute_us": compute_us,
            "exposed_comm_us": exposed, "overlap_pct": 100.0 * (comm_us - exposed) / comm_us}


def misses(measured: dict, want: dict) -> list[str]:
    """The quantities of a measured split that miss their known answer (see the docstring)."""
    k, c, step = want["comm_us"], want["compute_us"], want["step_us"]
    bounds = {"comm_us": TOLERANCE * k, "exposed_comm_us": TOLERANCE * k, "compute_us": TOLERANCE * c,
              "step_us": TOLERANCE * step, "overlap_pct": 100 * TOLERANCE}
    out = []
    for key, bound in bounds.items():
        got = measured.get(key)
        if got is None or abs(got - want[key]) > bound:
            out.append(f"{key} {got if got is None else round(got, 1)} (expected {want[key]:.1f} +- {bound:.1f})")
    idle = measured.get("idle_us")
    if idle is None or idle > TOLERANCE * step:
        out.append(f"idle_us {idle if idle is None else round(idle, 1)} (expected at most {TOLERANCE * step:.1f})")
    return out


@dataclass(kw_only=True)
class OverlapState(CaseState):
    world: object
    placement: str
    compute_us: float
    comm_us: float
    lib: object = None
    side: object = None
    missed: list = field(default_factory=list)


def setup(case, ctx) -> OverlapState:
    from ...errors import SkipCase

    try:
        import torch
    except ImportError:
        raise SkipCase("the overlap Case needs torch and a CUDA GPU") from None
    if not torch.cuda.is_available():
        raise SkipCase("the overlap Case needs a CUDA GPU; none is visible to this rank")
    from ... import jit

    placement = case.param("placement", "half")
    c, k = float(case.param("spin_compute_us", 2000.0)), float(case.param("spin_comm_us", 1000.0))
    state = OverlapState(world=ctx.world, placement=placement, compute_us=c, comm_us=k,
                         lib=jit.load("harness_spin"), stream=torch.cuda.Stream(), side=torch.cuda.Stream(),
                         count=1, timing_label="timeline")
    state.extra = {f"expected_{key}": v for key, v in expected(placement, c, k).items()}
    state.measure = lambda warmup, iters: measure(state, warmup, iters)
    return state


def _spin(state: OverlapState, kind: int, us: float, stream) -> None:
    if us <= 0:
        return
    rc = state.lib.cb_spin(kind, ctypes.c_longlong(int(round(us * 1000))), ctypes.c_void_p(stream.cuda_stream))
    if rc:
        raise RuntimeError(f"spin kernel launch failed: CUDA error {rc}")


def step(state: OverlapState) -> None:
    import torch

    a, b = state.stream, state.side
    o = offset_us(state.placement, state.compute_us, state.comm_us)
    _spin(state, 0, o, a)
    mark = torch.cuda.Event()
    mark.record(a)
    _spin(state, 0, state.compute_us - o, a)
    b.wait_event(mark)
    _spin(state, 1, state.comm_us, b)
    a.wait_stream(b)


def measure(state: OverlapState, warmup: int, iters: int) -> list[float]:
    from ...measure.gpu_timeline import GpuTimeline

    for _ in range(warmup):
        step(state)
    state.stream.synchronize()
    timeline = GpuTimeline(comm_names=(STANDIN,))
    with timeline.capture():
        state.world.barrier()
        for i in range(iters):
            with timeline.step(i):
                step(state)
        state.stream.synchronize()
    note = timeline.note or ("" if len(timeline.windows) == iters else
                             f"the timeline has {len(timeline.windows)} of {iters} steps")
    splits = [] if note else step_split.split_steps(timeline.intervals, timeline.windows)
    # every rank's (note, split) first: a rank failing alone would leave the others in the gather
    gathered = state.world.allgather((note, step_split.mean_split(splits)))
    notes = [f"rank {r}: {n}" for r, (n, _split) in enumerate(gathered) if n]
    if notes:
        raise RuntimeError(f"no timeline of the {iters} steps: {'; '.join(notes)}")
    rank, split = step_split.slowest([s for _n, s in gathered])
    state.extra.update(split, slowest_rank=rank)
    want = {k[len("expected_"):]: v for k, v in state.extra.items() if k.startswith("expected_")}
    state.missed = misses(split, want)
    if state.missed:
        state.extra["check_failed"] = "; ".join(state.missed)
    state.timeline = {"source": timeline.source, "steps": timeline.windows, "intervals": timeline.intervals}
    state.sample_columns = {key: [s[key] for s in splits]
                            for key in ("compute_us", "comm_us", "exposed_comm_us", "idle_us")}
    return [s["step_us"] for s in splits]


def check(state: OverlapState) -> int:
    """Quantities off their known answer (counted once, on rank 0: every rank holds the same)."""
    return len(state.missed) if state.world.rank == 0 else 0
