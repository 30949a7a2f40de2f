"""The GPU tests' helpers and drivers on CPU stand-ins (gloo, MPI), one rank of an mpiexec job.

    mpiexec -n 2 python tests/unit/gpu_standin.py OUT.jsonl

Every GPU test module prepares its rank with its own helper (make_ctx, ctx, _ctx, the allreduce
driver) and measures through its own measure function; here each of them measures CPU Cases, so a
harness that cannot measure (a rank the runner refuses, a helper that lost a field) fails in CI
rather than on the GPU machine. Rank 0 writes one JSON line per Case.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gpu")]

from commbench.families.base import Case  # noqa: E402


def collective(backend: str, ranks: int) -> Case:
    return Case(suite="standin", bench="standin", family="collectives", op="all_reduce", backend=backend,
                variant="default", env=(), dtype="float32", size_bytes=4096, params=(), warmup=1, iters=3,
                timing="auto", ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def main(out_path: str) -> int:
    import test_moe_gpu
    import test_moe_layer_gpu
    import test_proxy_gpu
    import test_training_gpu
    from commbench.runner import measure_case
    from commbench.measure.standalone import close_rank

    rows = []
    ctx = test_moe_gpu.make_ctx()   # every helper below sets up the same process as a launch's rank
    for backend in ("gloo", "mpi"):
        row = test_moe_gpu.measure(collective(backend, ctx.world.size), ctx)
        rows.append({"helper": "test_moe_gpu.make_ctx+measure", **row})
    close_rank(ctx)
    for name, make in (("test_moe_layer_gpu.make_ctx", test_moe_layer_gpu.make_ctx),
                       ("test_proxy_gpu.ctx", test_proxy_gpu.ctx)):
        ctx = make()
        row, _ = measure_case(collective("mpi", ctx.world.size), ctx, "standin")
        rows.append({"helper": name, **row})
    test_training_gpu.BACKEND = "gloo"
    ctx = test_training_gpu._ctx()
    tiny = {"model": "tiny", "tokens_per_rank": 64, "layers": 2}
    for op, knobs, must_be_correct in (("fsdp", {}, True), ("cp", {"cp_comm": "p2p"}, True),
                                       ("fsdp", {"fault": "stale"}, False)):
        case = test_training_gpu.make_case(op, {**tiny, **knobs}, ctx.world.size, dtype="float32", iters=2)
        row = test_training_gpu.measure(case, ctx)
        problems = test_training_gpu._verdict(row, must_be_correct) if ctx.world.is_root else []
        rows.append({"helper": "test_training_gpu.measure", "problems": problems, **row})
    close_rank(ctx)
    if ctx.world.is_root:
        Path(out_path).write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
