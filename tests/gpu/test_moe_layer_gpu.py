"""GPU checks of the MoE layer op, straight through setup/measure/check (no runner).

pytest (1 rank):   pytest tests/gpu/test_moe_layer_gpu.py
several ranks:     mpirun -np 4 python3 tests/gpu/test_moe_layer_gpu.py OUT.jsonl [BACKEND,...]
DeepEP's low-latency mode brings NVSHMEM up itself, which a process can do once:
run deepep_ll in a process of its own (its own BACKEND list), as suites give it
a launch of its own.
Ranks may share one GPU: our kernels (CUDA IPC, NVSHMEM) and DeepEP (over the
MPI communicator) run there; NCCL baselines then skip. Every backend that runs
must give wrong = 0, and a layer broken on purpose (one expert with another's
weights) must give wrong > 0.
"""
from __future__ import annotations

import json
import sys

import pytest
import torch

from commbench.errors import SkipCase
from commbench.families import get_family
from commbench.comm.context import RankContext
from commbench.families.base import Case
from commbench.measure.step_split import invariant_problems

NO_GPU = not torch.cuda.is_available()
pytestmark = pytest.mark.gpu
BACKENDS = ("ipc", "ipc_ll", "nvshmem_ll", "nccl_a2a", "nccl_agrs", "symm_a2av", "deepep",
            "deepep_ll")
# DeepEP's low-latency kernels take hidden 2048 and up; 16 experts keep 4 ranks on one GPU cheap.
SMALL = {"hidden": 2048, "topk": 4, "experts": 16, "intermediate": 512, "num_sms": 8}


def make_case(backend, dtype="bfloat16", tokens=64, overlap="none", ranks=1, iters=5, **params):
    prm = {**SMALL, "tokens": tokens, "overlap": overlap, **params}
    return Case(suite="gpu-test", bench="layer", family="moe", op="layer", backend=backend,
                variant="default", env=(), dtype=dtype, size_bytes=tokens * prm["hidden"] * 2,
                params=tuple(sorted(prm.items())), warmup=2, iters=iters, timing="events",
                ranks=ranks, ranks_per_node=ranks, timeout_s=120)


def run_case(case: Case, ctx: RankContext, broken: bool = False) -> dict:
    """setup, measure (layer and parts), check, teardown; the row on every rank.

    ``broken``: before the check, rank 0's first local expert takes another
    expert's weights; the check must then find wrong tokens."""
    fam, world = get_family("moe"), ctx.world
    row = {"backend": case.backend, "dtype": case.dtype, "ranks": world.size, "broken": broken,
           **dict(case.params)}
    reason = fam.unsupported(case)
    if reason:
        return {**row, "status": "skipped", "reason": reason}
    try:
        state = fam.setup(case, ctx)
    except SkipCase as exc:
        world.barrier()
        return {**row, "status": "skipped", "reason": str(exc)}
    try:
        state.measure(case.warmup, case.iters)
        if broken and world.rank == 0:
            from commbench.families.moe.experts import expert_weights

            ex = state.experts
            other = (ex.first + 1) % state.problem.experts   # any expert but its own
            ex.w13[0], ex.w2[0] = expert_weights(other, ex.hidden, ex.inter, ex.device)
            # the copies ran on the current stream, the layer runs on a stream of its own: without
            # this wait the check's experts could still read the old weights (a MISSED verdict
            # that says nothing about the layer)
            torch.cuda.synchronize(ex.device)
        wrong = world.sum_int(fam.check(state))
    finally:
        fam.teardown(state)
    keep = ("layer_us", "dispatch_us", "expert_us", "combine_us", "serial_us", "comm_share",
            "overlap_gain", "grouped_gemm", "max_token_err", "calc_diff", "expert_pairs",
            "step_us", "comm_us", "compute_us", "exposed_comm_us", "overlap_pct", "idle_us",
            "tbo_hidden_us", "tbo_gain_pct", "timeline_note")
    return {**row, "status": "ok" if wrong == 0 else "wrong", "wrong": wrong,
            **{k: (round(v, 6) if isinstance(v, float) else v)
               for k, v in state.extra.items() if k in keep}}


def plan(ranks: int, backends=BACKENDS) -> list[tuple[Case, bool]]:
    out = []
    for backend in backends:
        for dtype in ("bfloat16", "float8_e4m3"):
            out.append((make_case(backend, dtype, ranks=ranks), False))
        out.append((make_case(backend, overlap="two_batch", ranks=ranks, routing="zipf"), False))
        out.append((make_case(backend, ranks=ranks), True))
    return out


def make_ctx() -> RankContext:
    import os

    from commbench.measure.standalone import open_rank

    os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", "2G")
    return open_rank()   # what a launch gives a rank: World, bound GPU, kill switches recorded


def close(ctx: RankContext) -> None:
    from commbench.measure.standalone import close_rank

    close_rank(ctx)


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
def test_pack_kernels_match_their_torch_twin():
    """Rows (int32 and int64 ids, packed strides, FP8) and slots (column-major scales)."""
    from commbench.families.moe import pack_ref
    from commbench.families.moe import reference as ref
    from commbench.families.moe.expert_pack import ExpertStep, RowsIn, RowsOut, SlotsIn, SlotsOut
    from commbench.families.moe.experts import LocalExperts

    dev, H, K, L, n = "cuda", 256, 4, 4, 50
    experts = LocalExperts(4, L, H, 128, dev)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 12, (n, K), generator=gen)
    ids[3] = -1
    w = torch.rand(n, K, generator=gen)
    x = ref.make_tokens(1, n, H, dev)
    for fp8 in (False, True):
        q, scales = ref.quantize_fp8(x)
        seen = ref.dequantize_fp8(q, scales).bfloat16() if fp8 else x
        g = pack_ref.pack_rows(seen.cpu(), ids, 4, L)
        want = pack_ref.unpack_rows(experts.forward(g.xe.to(dev), g.ends.to(dev)).cpu(), g, w)
        for ids64 in (False, True):
            rows = (q.view(torch.uint8) if fp8 else x).contiguous()
            dev_ids = ids.to(dev) if ids64 else ids.int().to(dev)
            dev_w = w.to(dev)
            step = ExpertStep(experts, "rows", int(g.ends[-1]), K, fp8, dev, max_rows=n)
            out = torch.empty(n, H, dtype=torch.float32, device=dev)
            step.run(RowsIn(rows.data_ptr(), rows.shape[1] * rows.element_size(),
                            scales.data_ptr(), scales.shape[1], dev_ids.data_ptr(), K, ids64, 4,
                            dev_w.data_ptr(), K, n), RowsOut(out.data_ptr(), H, True))
            torch.cuda.synchronize()
            assert not step.failed()
            assert torch.equal(step.ends.cpu(), g.ends)
            err = (out.cpu() - want).norm(dim=1) / want.norm(dim=1).clamp(min=1e-6)
            assert float(err.max()) < 1e-2, (fp8, ids64, float(err.max()))
    # slots: 2 experts x 3 sources x 8 slots; scales stored column-major per expert
    counts = torch.tensor([3, 0, 8, 1, 2, 5], dtype=torch.int32)
    slots = ref.make_tokens(2, 48, H, dev)
    q, scales = ref.quantize_fp8(slots)
    colmajor = scales.view(2, 24, H // 128).transpose(1, 2).contiguous().transpose(1, 2)
    exp2 = LocalExperts(0, 2, H, 128, dev)
    for fp8 in (False, True):
        seen = ref.dequantize_fp8(q, scales).bfloat16() if fp8 else slots
        g = pack_ref.pack_slots(seen, counts.long().to(dev), 3, 8)
        want = torch.zeros_like(slots)
        pack_ref.unpack_slots(exp2.forward(g.xe, g.ends.to(dev)), g, want)
        src = (q.view(torch.uint8) if fp8 else slots).contiguous()
        s = colmajor.stride()
        step = ExpertStep(exp2, "slots", int(counts.sum()), K, fp8, dev, num_segs=6)
        y = torch.zeros_like(slots)
        dev_counts = counts.to(dev)
        step.run(SlotsIn(src.data_ptr(), src.shape[1] * src.element_size(), colmajor.data_ptr(),
                         s[0], s[1], s[2], dev_counts.data_ptr(), 6, 3, 8),
                 SlotsOut(y.data_ptr(), H))
        torch.cuda.synchronize()
        assert not step.failed()
        err = (y.float() - want.float()).norm(dim=1) / want.float().norm(dim=1).clamp(min=1e-6)
        assert float(err.max()) < 1e-2, (fp8, float(err.max()))
    # a count larger than the plan is flagged, not written out of bounds
    step = ExpertStep(exp2, "slots", 4, K, False, dev, num_segs=6)
    step.run(SlotsIn(slots.data_ptr(), H * 2, 0, 0, 0, 0, dev_counts.data_ptr(), 6, 3, 8),
             SlotsOut(y.data_ptr(), H))
    torch.cuda.synchronize()
    assert step.failed()


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
def test_layer_one_rank_every_backend():
    ctx = make_ctx()
    try:
        # one process: leave out the two that bring NVSHMEM up by themselves (torch's symmetric
        # memory, DeepEP low latency) next to ours; the suites run them in launches of their own
        for case, broken in plan(1, tuple(b for b in BACKENDS if b not in ("symm_a2av", "deepep_ll"))):
            row = run_case(case, ctx, broken)
            if row["status"] == "skipped":
                print("skipped", case.backend, row["reason"])
                continue
            if broken:
                assert row["status"] == "wrong" and row["wrong"] > 0, row
            else:
                assert row["status"] == "ok", row
                assert row["layer_us"] > 0 and row["expert_us"] > 0, row
                # the split from the profiled batch keeps its invariants on every backend
                assert invariant_problems(row) == [], row
                assert (row.get("tbo_hidden_us") is not None) == (case.param("overlap") == "two_batch"), row
    finally:
        close(ctx)


def main(out_path: str, backends=BACKENDS) -> int:
    ctx = make_ctx()
    bad = 0
    try:
        for case, broken in plan(ctx.world.size, backends):
            try:
                row = run_case(case, ctx, broken)
            except Exception as exc:  # noqa: BLE001 - record the failure and go on
                row = {"backend": case.backend, "dtype": case.dtype, "broken": broken,
                       "status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:500]}
            caught = broken and row["status"] == "wrong"
            bad += (row["status"] in ("wrong", "failed") and not caught) or (
                broken and row["status"] == "ok")
            row["verdict"] = "caught" if caught else ("MISSED" if broken and row["status"] == "ok"
                                                      else row["status"])
            if ctx.world.is_root:
                print(json.dumps(row), flush=True)
                with open(out_path, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    finally:
        close(ctx)
    return 1 if bad else 0


if __name__ == "__main__":
    chosen = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else BACKENDS
    sys.exit(main(sys.argv[1], chosen))
