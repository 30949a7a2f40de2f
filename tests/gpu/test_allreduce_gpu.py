"""allreduce family on a GPU machine: correctness with several ranks sharing one GPU.

Run with pytest; each test starts this file under mpirun as a small driver
that measures each Case through the runner (commbench.runner.measure_case:
set-up, warm-up, timed batch, check, teardown) and asserts on the rows it prints.
Set COMMBENCH_GPU_OUT=<dir> to keep the rows (JSON lines) and NCCL's debug logs.
Several ranks on one GPU prove correctness, not speed; NCCL refuses two ranks on one GPU,
so NCCL runs with one rank here.
Multicast Cases must come out skipped: our machines set the kill switches.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILL_SWITCHES = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _mpirun() -> str | None:
    return os.environ.get("COMMBENCH_MPIEXEC") or shutil.which("mpirun") or shutil.which("mpiexec")


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="no CUDA GPU visible: allreduce GPU tests need one")
needs_mpi = pytest.mark.skipif(_mpirun() is None, reason="no mpirun/mpiexec on PATH")
pytestmark = pytest.mark.gpu


def _nccl_case():
    from commbench.families.base import Case

    return Case(suite="gpu-test", bench="gpu", family="allreduce", op="all_reduce", backend="nccl", variant="default",
                env=(), dtype="float32", size_bytes=8, params=(), warmup=0, iters=1, timing="events", ranks=1,
                ranks_per_node=1, timeout_s=60)


def run_driver(ranks: int, backends: list[str], *, sizes=("8B", "4KiB", "1MiB"), dtypes=("float32", "bfloat16"),
               env: dict | None = None, params: dict | None = None, tag: str = "run", timeout_s: int = 120):
    """Start the driver under mpirun and return its rows (rank 0's JSON lines)."""
    out_root = Path(os.environ.get("COMMBENCH_GPU_OUT", "/tmp/commbench-gpu-out"))
    out_root.mkdir(parents=True, exist_ok=True)
    rows_path = out_root / f"rows-{tag}.jsonl"
    rows_path.unlink(missing_ok=True)
    child_env = {**os.environ, **(env or {}), **KILL_SWITCHES,
                 "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1", "PYTHONPATH": str(ROOT),
                 "COMMBENCH_LOG_DIR": str(out_root / f"logs-{tag}"), "PYTHONUNBUFFERED": "1"}
    from commbench.families import get_family

    # what a launch adds for NCCL Cases (AllReduceFamily.launch_env): NCCL's TUNING lines in logs-<tag>/nccl/
    nccl_env = get_family("allreduce").launch_env(_nccl_case(), child_env, out_root / f"logs-{tag}")
    child_env.update(nccl_env)
    forwarded = sorted(set(KILL_SWITCHES) | set(env or {}) | set(nccl_env) | {
        "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "PYTHONPATH", "COMMBENCH_LOG_DIR", "PYTHONUNBUFFERED",
        "COMMBENCH_JIT_CACHE"} & set(child_env))
    argv = [_mpirun(), "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]
    for key in forwarded:
        argv += ["-x", key]
    argv += [sys.executable, str(Path(__file__).resolve()), "--rows", str(rows_path),
             "--backends", *backends, "--sizes", *sizes, "--dtypes", *dtypes,
             "--params", json.dumps(params or {}), "--env-json", json.dumps(env or {})]
    proc = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=timeout_s)
    (out_root / f"driver-{tag}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in rows_path.read_text().splitlines()]


def _assert_all_ok(rows, expected_count):
    assert len(rows) == expected_count, rows
    for row in rows:
        assert row["status"] == "ok", row
        assert row["wrong"] == 0, row


@needs_gpu
@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_own_kernels_correct_with_ranks_sharing_the_gpu(ranks):
    rows = run_driver(ranks, ["cb_one_shot", "cb_two_shot"], sizes=("8B", "4KiB", "1MiB", "3000000B"),
                      tag=f"cb-{ranks}")
    _assert_all_ok(rows, 2 * 2 * 4)


@needs_gpu
@needs_mpi
def test_own_kernels_over_torch_symmetric_memory():
    rows = run_driver(2, ["cb_two_shot"], sizes=("4KiB", "1MiB"), dtypes=("bfloat16",),
                      params={"peer_memory": "torch_symm"}, tag="cb-symm")
    _assert_all_ok(rows, 2)


@needs_gpu
@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_torch_one_and_two_shot(ranks):
    rows = run_driver(ranks, ["torch_one_shot", "torch_two_shot"], sizes=("4KiB", "1MiB"), tag=f"torch-{ranks}")
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        assert row["status"] in ("ok", "skipped"), row
        if row["status"] == "ok":
            assert row["wrong"] == 0, row
    assert any(r["status"] == "ok" for r in rows)


@needs_gpu
@needs_mpi
@pytest.mark.parametrize("algo", ["", "Ring"])
def test_nccl_one_rank_and_tuning_log(algo):
    env = {"NCCL_ALGO": algo} if algo else {}
    rows = run_driver(1, ["nccl", "nccl_symm"], sizes=("8B", "1MiB", "64MiB"), dtypes=("float32",),
                      env=env, tag=f"nccl-{algo or 'auto'}")
    assert len(rows) == 6
    for row in rows:
        assert row["status"] in ("ok", "skipped"), row
        if row["status"] == "ok":
            assert row["wrong"] == 0 and row["nccl_version"], row
            assert row["nccl_algo_forced"] == algo
    assert all(r["status"] == "ok" for r in rows if r["backend"] == "nccl")


@needs_gpu
@needs_mpi
def test_multicast_cases_are_skipped_with_the_kill_switch_reason():
    rows = run_driver(1, ["nccl", "torch_multimem"], sizes=("1MiB",), dtypes=("float32",),
                      env={"NCCL_ALGO": "NVLS"}, params={"allow_multicast": True}, tag="multicast")
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "skipped", row
        assert row["reason"].startswith("multicast disabled by site kill switch ("), row
        assert "time_us" not in row  # nothing was launched


# ---------------------------------------------------------------- driver (under mpirun)

def _measure(case, ctx) -> dict:
    """The runner's own path for one Case (measure_case: set-up, warm-up, timed batch, check)."""
    from commbench.runner import measure_case

    row, _ = measure_case(case, ctx, "gpu-test")
    row["ranks"] = ctx.world.size
    return {k: v for k, v in row.items() if v is not None}   # a Case never launched has no times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--backends", nargs="+", required=True)
    ap.add_argument("--sizes", nargs="+", required=True)
    ap.add_argument("--dtypes", nargs="+", required=True)
    ap.add_argument("--params", default="{}")
    ap.add_argument("--env-json", default="{}")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--family", default="allreduce")   # collectives: the CPU stand-in's gloo/mpi run
    args = ap.parse_args(argv)
    from commbench.families.base import Case
    from commbench.measure.standalone import close_rank, open_rank
    from commbench.units import parse_size

    ctx = open_rank(needs_gpu=args.family != "collectives" or any(b not in ("gloo", "mpi") for b in args.backends))
    # ^ what a launch gives a rank: World, bound GPU, kill switches recorded
    world = ctx.world
    params = tuple(sorted(json.loads(args.params).items()))
    env = tuple(sorted(json.loads(args.env_json).items()))
    rows = []
    try:
        for backend in args.backends:
            for dtype in args.dtypes:
                for size in args.sizes:
                    case = Case(suite="gpu-test", bench="gpu", family=args.family, op="all_reduce",
                                backend=backend, variant="default", env=env, dtype=dtype,
                                size_bytes=parse_size(size), params=params, warmup=2, iters=args.iters,
                                timing="events", ranks=world.size, ranks_per_node=world.size, timeout_s=60)
                    rows.append(_measure(case, ctx))
                    if world.is_root:
                        print(json.dumps(rows[-1]), flush=True)
    finally:
        close_rank(ctx)
    if world.is_root:
        Path(args.rows).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
