"""GPU checks of the training family, straight through setup/measure/check (no runner).

pytest (1 rank on one GPU):  pytest tests/gpu/test_training_gpu.py
several GPUs (one per rank): mpirun -np 4 python3 tests/gpu/test_training_gpu.py OUT.jsonl
Every op and every cp_comm must come back with wrong = 0 and the counted bytes equal to the
formula; the stale-data faults must come back wrong. One rank still runs the real GEMMs,
SDPA, NCCL collectives (on one rank they are copies), streams and the reference checks.
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
MEDIUM = {"model": "llama3-8b", "tokens_per_rank": 4096, "layers": 2}
SMALL = {"model": "tiny", "hidden": 1024, "ffn": 2816, "heads": 8, "kv_heads": 2, "tokens_per_rank": 1024,
         "layers": 2}


BACKEND = "nccl"   # the CPU stand-in (tests/unit/test_gpu_harness_cpu.py) drives this plan on gloo


def make_case(op, params, ranks, dtype="bfloat16", iters=5):
    return Case(suite="gpu-test", bench="training", family="training", op=op, backend=BACKEND,
                variant="default", env=(), dtype=dtype, size_bytes=1, params=tuple(sorted(params.items())),
                warmup=2, iters=iters, timing="auto", ranks=ranks, ranks_per_node=ranks, timeout_s=600)


def plan(ranks: int) -> list[tuple[Case, bool]]:
    """(Case, must it be correct?)"""
    out = []
    for op, knobs in (("fsdp", {}), ("fsdp", {"prefetch": False, "reshard_after_forward": False}),
                      ("fsdp", {"reduce_dtype": "float32"}), ("distopt", {}),
                      ("distopt", {"overlap_grad_reduce": False, "overlap_param_gather": False}),
                      ("tp", {}), ("tp", {"sequence_parallel": True}),
                      ("cp", {"cp_comm": "p2p"}), ("cp", {"cp_comm": "all_gather"}),
                      ("cp", {"cp_comm": "a2a"}), ("cp", {"cp_comm": "a2a+p2p"})):
        out.append((make_case(op, {**MEDIUM, **knobs}, ranks), True))
    if ranks >= 2 and ranks % 2 == 0:
        out.append((make_case("fsdp", {**MEDIUM, "replicate": 2}, ranks), True))
    for op in ("fsdp", "cp"):                        # fp32 (cp: the explicit-softmax block path)
        out.append((make_case(op, SMALL, ranks, dtype="float32"), True))
    # faults that show even on one rank: stale parameters (fsdp layer 1, distopt's gather)
    for op in ("fsdp", "distopt"):
        out.append((make_case(op, {**SMALL, "fault": "stale"}, ranks), False))
    return out


def measure(case: Case, ctx: RankContext) -> dict:
    """The runner's own path for one Case (measure_case: set-up, timing, check, teardown); rank 0's
    row (every rank returns its status)."""
    from commbench.runner import measure_case

    row, samples = measure_case(case, ctx, "gpu-test")
    row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if v is not None}
    return {**row, "ranks": ctx.world.size, "samples": len(samples)}


def _ctx(world=None) -> RankContext:
    from commbench.measure.standalone import open_rank

    return open_rank(world=world)   # what a launch gives a rank: bound GPU, kill switches recorded


def _verdict(row: dict, must_be_correct: bool) -> list[str]:
    bad = []
    if row["status"] == "skipped":
        return bad
    if must_be_correct and row["wrong"] != 0:
        bad.append(f"wrong={row['wrong']} ({row.get('check_failed')})")
    if not must_be_correct and row["wrong"] == 0:
        bad.append("a stale schedule passed the check")
    if row["comm_bytes_per_rank"] != row["comm_bytes_per_rank_measured"]:
        bad.append(f"bytes: formula {row['comm_bytes_per_rank']} counted {row['comm_bytes_per_rank_measured']}")
    if row["status"] not in ("ok", "wrong"):
        bad.append(f"status {row['status']}: {row.get('reason')}")
        return bad
    if must_be_correct and row["status"] == "wrong":
        bad.append(f"wrong: {row.get('reason')}")   # e.g. the step split broke an invariant
    if row["timing"] not in ("step_events", "step_host") or not row.get("time_us", 0) > 0:
        bad.append("no event timing")
    if row.get("timeline_note") or row.get("idle_us") is None:
        bad.append(f"no step split: {row.get('timeline_note')}")
    return bad


@pytest.fixture(scope="module")
def ctx():
    if NO_GPU:
        pytest.skip("no CUDA GPU on this machine")
    return _ctx()


@pytest.mark.skipif(NO_GPU, reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("index", range(len(plan(1))))
def test_one_rank(ctx, index):
    case, must_be_correct = plan(ctx.world.size)[index]
    row = measure(case, ctx)
    print(json.dumps(row))
    assert row["status"] != "skipped", row.get("reason")
    assert not _verdict(row, must_be_correct), (_verdict(row, must_be_correct), row)


def main(out_path: str) -> int:
    ctx = _ctx()
    world = ctx.world
    failures = 0
    with open(out_path, "w") if world.is_root else open("/dev/null", "w") as fh:
        for case, must_be_correct in plan(world.size):
            row = measure(case, ctx)
            bad = _verdict(row, must_be_correct) if world.is_root else []   # the row lives on rank 0
            failures += bool(bad)
            if world.is_root:
                fh.write(json.dumps({**row, "problems": bad}) + "\n")
                fh.flush()
                print(case.op, dict(case.params).get("cp_comm", ""), row["status"], bad, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdout"))
