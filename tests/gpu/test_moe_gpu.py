"""GPU checks of the moe family, each Case through the runner's measure_case.

pytest (1 rank):   pytest tests/gpu/test_moe_gpu.py
several ranks:     mpirun -np 4 python3 tests/gpu/test_moe_gpu.py OUT.jsonl
Ranks may share one GPU (CUDA IPC works there); NCCL baselines then skip.
"""
from __future__ import annotations

import json
import sys

import pytest
import torch

from commbench.comm.context import RankContext
from commbench.families.base import Case

NO_GPU = not torch.cuda.is_available()
pytestmark = pytest.mark.gpu
SMALL = {"hidden": 2048, "topk": 4, "experts": 16, "num_sms": 8}
DEEPEP = {"hidden": 7168, "topk": 8, "experts": 256, "num_sms": 24, "seed": 1}
DEEPEP_LL = {"hidden": 7168, "topk": 8, "experts": 288, "num_sms": 132, "seed": 1}


def make_case(op, backend, dtype, tokens, params, ranks, iters=10):
    return Case(suite="gpu-test", bench="moe", family="moe", op=op, backend=backend,
                variant="default", env=(), dtype=dtype, size_bytes=tokens * params["hidden"] * 2,
                params=tuple(sorted(params.items())), warmup=3, iters=iters, timing="events",
                ranks=ranks, ranks_per_node=ranks, timeout_s=120)


def measure(case: Case, ctx: RankContext) -> dict:
    """The runner's own path for one Case (measure_case); the row on rank 0, status on every rank."""
    from commbench.runner import measure_case

    row, _ = measure_case(case, ctx, "gpu-test")
    row = {k: v for k, v in row.items() if v is not None}
    row["ranks"] = ctx.world.size
    if row["status"] == "ok" and "algbw_gbps" in row:   # DeepEP's accounting and the link bytes
        row.update(deepep_gbps=round(row["algbw_gbps"], 2), link_gbps=round(row["busbw_gbps"], 2))
    return row


def plan(ranks: int) -> list[Case]:
    cases = []
    for routing in ("random", "group", "zipf"):
        p = {**SMALL, "routing": routing}
        for backend in ("ipc", "ipc_ll", "nvshmem_ll"):
            for op, dtype in (("dispatch", "bfloat16"), ("dispatch", "float8_e4m3"),
                              ("combine", "bfloat16")):
                if routing == "random" or op == "dispatch":
                    cases.append(make_case(op, backend, dtype, 128, p, ranks))
    if ranks == 1:
        for backend in ("ipc", "nccl_a2a", "nccl_agrs", "symm_a2av", "deepep"):
            for op, dtype in (("dispatch", "bfloat16"), ("dispatch", "float8_e4m3"),
                              ("combine", "bfloat16")):
                cases.append(make_case(op, backend, dtype, 4096, DEEPEP, 1, iters=20))
        for backend in ("ipc_ll", "nvshmem_ll", "nccl_a2a"):
            for op, dtype in (("dispatch", "bfloat16"), ("dispatch", "float8_e4m3"),
                              ("combine", "bfloat16")):
                cases.append(make_case(op, backend, dtype, 128, DEEPEP_LL, 1, iters=20))
    return cases


def make_ctx() -> RankContext:
    import os

    from commbench.measure.standalone import open_rank

    # the batched layout of DeepEP's low-latency shape needs ~1.07 GB of symmetric heap (default 1 GiB)
    os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", "4G")
    return open_rank()   # what a launch gives a rank: World, bound GPU, kill switches recorded


def close(ctx: RankContext) -> None:
    from commbench.measure.standalone import close_rank

    close_rank(ctx)


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
def test_small_shapes_one_rank_are_correct():
    ctx = make_ctx()
    try:
        for case in plan(1)[:12]:
            row = measure(case, ctx)
            assert row["status"] == "ok", row
            assert row["calc_diff"] < (5e-4 if case.dtype == "float8_e4m3" else 5e-6)
    finally:
        close(ctx)


def main(out_path: str) -> int:
    ctx = make_ctx()
    bad = 0
    try:
        for case in plan(ctx.world.size):
            try:
                row = measure(case, ctx)
            except Exception as exc:  # noqa: BLE001 - record the failure and go on to the next Case
                row = {"op": case.op, "backend": case.backend, "dtype": case.dtype,
                       "status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:500]}
            bad += row["status"] in ("wrong", "failed")
            if ctx.world.is_root:
                print(json.dumps(row), flush=True)
                with open(out_path, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    finally:
        close(ctx)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
