"""Family `training`: the communication of a training step, measured inside the step.

Ops are parallelism strategies (fsdp, distopt, tp, cp) run as real steps:
GEMMs and SDPA attention of a model preset's shapes, collectives through
torch.distributed (NCCL on GPUs, gloo on the CPU) on the group's
communication stream, overlapped as the strategy schedules them. The steps
are timed unrecorded (time_us), then a short batch of them is recorded on a
timeline and split into compute, exposed communication and idle time
(steptime.py, measure/step_split.py); the check compares with a
single-process reference (docs/families/training.md).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...comm.context import RankContext
from ...errors import SkipCase
from ...measure.device import nccl_identity_clash
from ...measure.state import CaseState
from ..base import Case, Family, Traffic
from .params import PARAMS
from .shapes import Shape, problems, resolve

OPS = ("fsdp", "distopt", "tp", "cp")
# which parameters each op reads (the others are ignored for it)
SHAPE_KEYS = ("model", "hidden", "ffn", "heads", "kv_heads", "head_dim", "tokens_per_rank", "seq_len",
              "layers", "replicate", "cp_comm", "cp_a2a_size", "sequence_parallel", "bucket_params")


@dataclass(kw_only=True)
class TrainingState(CaseState):
    """A Case's schedule and its Comm; the step times itself (CaseState.measure)."""

    schedule: object
    comm: object
    shape: Shape
    world: object


class TrainingFamily(Family):
    name = "training"
    summary = "training steps (FSDP, distributed optimizer, TP/SP, context parallel): exposed communication"
    ops = OPS
    backends = ("nccl", "gloo")
    dtypes = ("bfloat16", "float32")
    default_dtype = "bfloat16"
    needs_gpu = True
    params = PARAMS

    # --- planning ---
    def validate_bench(self, bench: dict) -> list[tuple[str, str]]:
        params = bench.get("params") or {}
        out: list[tuple[str, str]] = []
        sizes = bench.get("sizes")
        if isinstance(sizes, (list, dict)) and (not isinstance(sizes, list) or len(sizes) > 1):
            out.append(("sizes", "the training family takes its sizes from the model shape "
                                 "(model, tokens_per_rank, layers): remove the size sweep"))
        ranks = [r for r in _as_list(bench.get("ranks", 1)) if isinstance(r, int) and r > 0]
        rpn = bench.get("ranks_per_node")
        keys = [k for k in SHAPE_KEYS if k in params]
        for op, dtype, world in itertools.product(_as_list(bench.get("ops", list(OPS))),
                                                  _as_list(bench.get("dtypes", [self.default_dtype])),
                                                  ranks):
            if op not in OPS or dtype not in self.dtypes:
                continue
            for combo in itertools.product(*[_as_list(params[k]) for k in keys]):
                chosen = dict(zip(keys, combo))
                if any(PARAMS[k].problem(k, v) for k, v in chosen.items()):
                    continue   # the Param check reports it (type, range)
                shape = resolve(chosen, op, dtype, world, rpn if isinstance(rpn, int) else None)
                for fld, msg in problems(shape):
                    what = f"{msg} (op {op}, {world} rank(s)"
                    what += "".join(f", {k}={v}" for k, v in chosen.items()) + ")"
                    if (fld, what) not in out:
                        out.append((fld, what))
        return out

    def impossible(self, case: Case) -> tuple[str, str] | None:
        found = problems(self.shape(case, case.ranks, case.ranks_per_node))
        return found[0] if found else None

    def shape(self, case: Case, world: int, ranks_per_node: int | None = None) -> Shape:
        return resolve(dict(case.params), case.op, case.dtype, world, ranks_per_node)

    def memory_bytes(self, case: Case, world_size: int):
        """A GPU step's device memory per rank (memory.py); CPU backends carry none."""
        if case.backend != "nccl":
            return None
        from .memory import step_plan

        return step_plan(self.shape(case, world_size, case.ranks_per_node))

    # --- measuring ---
    def setup(self, case: Case, ctx: RankContext) -> TrainingState:
        from . import groups
        from .bytes import step_bytes
        from .comm import Comm

        world = ctx.world
        s = self.shape(case, world.size, world.local_size)
        found = problems(s)
        if found:
            raise SkipCase(found[0][1])
        device = _device(case.backend, ctx)
        groups.world_group(ctx)
        comm = Comm(world.rank)
        stream = None
        if device != "cpu":
            import torch

            stream, comm.side_stream = torch.cuda.Stream(), torch.cuda.Stream()
        with _on(stream):
            schedule = SCHEDULES[case.op](s, ctx, comm, device)
        if stream is not None:
            stream.synchronize()
        formula = step_bytes(s)
        state = TrainingState(schedule=schedule, comm=comm, shape=s, world=world, stream=stream,
                              extra=_columns(s, formula), size_bytes=int(round(formula["total"])),
                              count=s.tokens, timing_label="step_events" if stream is not None else "step_host",
                              columns_from_time=lambda t_us: {"tokens_per_s": s.tokens / (t_us * 1e-6)})
        state.measure = lambda warmup, iters: self.measure_steps(state, warmup, iters)
        return state

    def run(self, state: TrainingState) -> None:
        from .schedule import NullTimer

        with _on(state.stream):
            state.schedule.step(NullTimer())

    def measure_steps(self, state: TrainingState, warmup: int, iters: int) -> list[float]:
        """The timed steps (the row's time_us), a profiled batch split per step from its timeline,
        and the two cross-check runs (steptime.py)."""
        from . import steptime

        cuda = state.stream is not None
        timeline = _timeline(cuda)
        sync = state.stream.synchronize if cuda else (lambda: None)
        with _on(state.stream):
            modes = steptime.run_modes(state.schedule, state.comm, warmup, iters, cuda,
                                       state.world.barrier, sync, timeline)
        mine = steptime.rank_result(modes, timeline, iters)
        sent = sum(state.comm.sent_bytes.values())
        gathered = state.world.allgather((mine, sent))
        cols = steptime.summarize([g[0] for g in gathered])
        measured = max(g[1] for g in gathered)
        cols["comm_bytes_per_rank_measured"] = int(round(measured))
        formula = state.extra["comm_bytes_per_rank"]
        comm_us = cols.get("comm_us") or 0.0
        cols["comm_busbw_gbps"] = formula / comm_us / 1e3 if comm_us > 0 else 0.0
        state.extra.update(cols)
        state.sample_columns = steptime.sample_columns(mine)
        if timeline.windows:
            state.timeline = {"source": timeline.source, "steps": timeline.windows,
                              "intervals": timeline.intervals}
        return steptime.samples(mine)

    def check(self, state: TrainingState) -> int:
        with _on(state.stream):
            tally = state.schedule.check()
        if state.stream is not None:
            state.stream.synchronize()
        everyone = state.world.allgather((tally.max_err, tally.where[:3]))
        state.extra["check_max_err"] = max(err for err, _where in everyone)
        failed = [f"rank {r}: {name}" for r, (_err, where) in enumerate(everyone) for name in where]
        if failed:
            state.extra["check_failed"] = "; ".join(failed[:4])
        return tally.wrong

    def traffic(self, case: Case, world_size: int) -> Traffic:
        from .bytes import step_bytes

        # algbw/busbw of the row: bytes each rank sends per step over the step's time
        return Traffic(step_bytes(self.shape(case, world_size, case.ranks_per_node))["total"], 1.0)

    def teardown(self, state: TrainingState) -> None:
        state.schedule = None
        state.comm = None
        state.measure = None


def _as_list(v) -> list:
    return list(v) if isinstance(v, list) else [v]


def _timeline(cuda: bool):
    from ...measure.gpu_timeline import GpuTimeline
    from ...measure.host_timeline import HostTimeline

    return GpuTimeline() if cuda else HostTimeline()


def _device(backend: str, ctx: RankContext) -> str:
    if backend == "gloo":
        return "cpu"
    if not str(ctx.device).startswith("cuda"):
        raise SkipCase("the nccl backend needs a CUDA GPU; none is visible to this rank")
    clash = nccl_identity_clash(ctx.world, ctx.device)   # ranks sharing a GPU: own NCCL_HOSTID each
    if clash:
        raise SkipCase(clash)
    return ctx.device


class _on:
    """Run on a CUDA stream (or on the CPU when there is none)."""

    def __init__(self, stream):
        self.stream, self.inner = stream, None

    def __enter__(self):
        if self.stream is not None:
            import torch

            self.inner = torch.cuda.stream(self.stream)
            self.inner.__enter__()

    def __exit__(self, *exc):
        if self.inner is not None:
            self.inner.__exit__(*exc)


def _columns(s: Shape, formula: dict) -> dict:
    """Columns known before measuring: the resolved shape, the strategy, the formula bytes."""
    return {"strategy": strategy(s), "hidden": s.hidden, "ffn": s.ffn, "heads": s.heads,
            "kv_heads": s.kv_heads, "head_dim": s.head_dim, "seq_len": s.seq_len,
            "micro_batch": s.micro_batch, "model_layers": s.model_layers,
            "reduce_dtype": s.reduce_dtype, "comm_bytes_per_rank": int(round(formula["total"])),
            "tokens_per_rank": s.tokens}


def strategy(s: Shape) -> str:
    """A short label of the op's own knobs and its parallel layout (report bars, tables)."""
    p = s.p
    if s.op == "fsdp":
        label = ("reshard" if p("reshard_after_forward") else "no-reshard") + (
            "+prefetch" if p("prefetch") else "")
        return label + (f" hsdp {s.replicate}x{s.shard}" if s.replicate > 1 else f" dp{s.world}")
    if s.op == "distopt":
        from .bytes import bucket_sizes

        grad = "overlap-grad" if p("overlap_grad_reduce") else "sync-grad"
        param = "overlap-param" if p("overlap_param_gather") else "sync-param"
        return f"{grad}+{param} buckets={len(bucket_sizes(s))} dp{s.world}"
    if s.op == "tp":
        return ("sp" if p("sequence_parallel") else "no-sp") + f" tp{s.world}"
    if p("cp_comm") == "a2a+p2p":
        return f"a2a+p2p cp{s.world} ({s.a2a_size}x{s.ring_size})"
    return f"{p('cp_comm')} cp{s.world}"


def _schedules():
    from .cp import CpSchedule
    from .distopt import DistoptSchedule
    from .fsdp import FsdpSchedule
    from .tp import TpSchedule

    return {"fsdp": FsdpSchedule, "distopt": DistoptSchedule, "tp": TpSchedule, "cp": CpSchedule}


class _Lazy(dict):
    """The op -> schedule table, imported on first use (schedules import torch)."""

    def __missing__(self, key):
        self.update(_schedules())
        return dict.__getitem__(self, key)


SCHEDULES = _Lazy()
FAMILY = TrainingFamily()
