"""Memory planned per Case, on the GPU: each family's estimate (mem_estimate_bytes) against what
the Case really took (mem_peak_bytes: torch's peak allocation above what was allocated before
the Case, plus what set-up took outside torch: NVSHMEM heap, IPC buffers), through the runner.

    pytest -s -m gpu tests/gpu/test_memory_plan_gpu.py      (1 GPU; about a minute on an H100)

Margin: an estimate may not fall below 0.9 x the peak - 256 MiB (an estimate under the truth is
how a Case meets an out-of-memory error; the fit check keeps 1 GiB of the GPU free besides the
estimate, which covers a miss of that size), nor exceed 1.5 x the peak + 1 GiB (an estimate far
above it skips Cases that would fit). The proxy's 256 MiB Case runs twice: on an H100 (2026-12-07)
both runs peaked ~0.1 GiB above its plan (0.53 GiB), so the miss is per Case, not a library's first
load; what takes it is not yet known, and the table shows whether it changes.
A Case forced not to fit (llama3-405b's distributed optimizer at one rank)
must be skipped with "needs X GiB, Y GiB free on <this GPU>", and the next Case must still run.
The table of estimates and peaks is printed (-s) for the measurement notes.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from commbench.families.base import Case
from commbench.measure.memory import GIB

NO_GPU = not torch.cuda.is_available()
pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
LOW, HIGH, SLACK_BYTES, BELOW_BYTES = 0.9, 1.5, 1 << 30, 256 << 20


def suite_case(suite: str, bench: str, backend: str, dtype: str, **params) -> Case:
    """The Case the shipped suite runs at one rank (presets filled in), made short."""
    from commbench.suite.loader import load_suite

    cases = load_suite(ROOT / "suites" / suite, gpu_count=1, overrides={"ranks": 1}).cases
    for c in cases:
        if (c.bench, c.backend, c.dtype) == (bench, backend, dtype) and \
                all(c.param(k) == v for k, v in params.items()):
            return dataclasses.replace(c, warmup=1, iters=3)
    raise LookupError(f"{suite}: no {bench}/{backend}/{dtype} Case with {params}")


def with_params(case: Case, **params) -> Case:
    merged = {**dict(case.params), **params}
    return dataclasses.replace(case, params=tuple(sorted(merged.items())))


def cases() -> list[tuple[str, Case]]:
    moe = dict(model="deepseek-v3", overlap="none")
    distopt = suite_case("training.yaml", "distopt", "nccl", "bfloat16", model="llama3-70b",
                         overlap_grad_reduce=True, overlap_param_gather=True)
    # symm_a2av needs 2 or more ranks (torch's NVSHMEM backend): not in this one-process test
    return [
        ("moe ipc deepseek-v3", suite_case("moe-layer.yaml", "prefill", "ipc", "bfloat16", **moe)),
        # one layer of the 70B: fits 80 GB (two layers' check needs more than an H100 has)
        ("distopt llama3-70b (1 layer)", with_params(distopt, layers=1)),
        ("all_reduce 4 GiB", _all_reduce(4 << 30)),
        # allreduce-algos' largest size: its whole-buffer int64 pattern ran out of memory on an H100
        ("allreduce nccl 8 GiB bf16", _allreduce_algos("nccl-auto", "nccl", 8 << 30)),
        ("allreduce cb_two_shot 2 GiB", _allreduce_algos("commbench-kernels", "cb_two_shot", 2 << 30)),
        # the families planned last: copy within GPU 0, a GEMM beside an all-reduce, proxy transfers
        ("copy d2d ce 4 GiB", _largest("copy.yaml", "device", op="d2d", engine="ce")),
        ("interference all_reduce 256 MiB", _largest("interference.yaml", "ops", op="all_reduce")),
        ("proxy direct bandwidth 256 MiB", _largest("proxy.yaml", "direct-bandwidth", executor="device")),
        ("proxy again (library loaded)", _largest("proxy.yaml", "direct-bandwidth", executor="device")),
    ]


def _largest(suite: str, bench: str, op: str | None = None, **params) -> Case:
    """The largest Case of a shipped suite's benchmark at one rank (op and params as given), made short."""
    from commbench.suite.loader import load_suite

    found = [c for c in load_suite(ROOT / "suites" / suite, gpu_count=1, overrides={"ranks": 1}).cases
             if c.bench == bench and (op is None or c.op == op) and all(c.param(k) == v for k, v in params.items())]
    if not found:
        raise LookupError(f"{suite}: no {bench}/{op} Case with {params}")
    return dataclasses.replace(max(found, key=lambda c: c.size_bytes), warmup=1, iters=3)


def _allreduce_algos(bench: str, backend: str, size_bytes: int) -> Case:
    from commbench.suite.loader import load_suite

    for c in load_suite(ROOT / "suites" / "allreduce-algos.yaml", gpu_count=1, overrides={"ranks": 1}).cases:
        if (c.bench, c.backend, c.size_bytes) == (bench, backend, size_bytes):
            return dataclasses.replace(c, warmup=1, iters=3)
    raise LookupError(f"allreduce-algos.yaml: no {bench}/{backend} Case of {size_bytes} B")


def _all_reduce(size_bytes: int) -> Case:
    return Case(suite="gpu-test", bench="memory", family="collectives", op="all_reduce", backend="nccl",
                variant="default", env=(), dtype="float32", size_bytes=size_bytes, params=(), warmup=1,
                iters=3, timing="events", ranks=1, ranks_per_node=1, timeout_s=120)


@pytest.mark.gpu
@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
def test_estimates_hold_against_the_peaks_and_a_case_that_cannot_fit_is_skipped():
    from commbench.measure.standalone import close_rank, open_rank
    from commbench.runner import measure_case

    ctx = open_rank()
    name = torch.cuda.get_device_name(ctx.device)
    bad, lines = [], [f"{'Case':32} {'status':8} {'estimate GiB':>12} {'peak GiB':>9} {'ratio':>6}"]
    try:
        too_big = with_params(suite_case("training.yaml", "distopt", "nccl", "bfloat16", model="llama3-70b",
                                         overlap_grad_reduce=True, overlap_param_gather=True),
                              model="llama3-405b", layers=8)
        row, _ = measure_case(too_big, ctx, "gpu-test")
        if row["status"] != "skipped" or not row["reason"].startswith("needs ") or \
                f"free on {name}" not in row["reason"]:
            bad.append(f"a Case that cannot fit: {row['status']}: {row['reason']}")
        lines.append(f"{'distopt llama3-405b x8 layers':32} {row['status']:8} "
                     f"{row.get('mem_estimate_bytes', 0) / GIB:12.1f} {'-':>9} {'-':>6}  {row['reason'][:90]}")
        for label, case in cases():
            row, _ = measure_case(case, ctx, "gpu-test")
            est, peak = row.get("mem_estimate_bytes"), row.get("mem_peak_bytes")
            ratio = est / peak if est and peak else float("nan")
            lines.append(f"{label:32} {row['status']:8} {(est or 0) / GIB:12.1f} {(peak or 0) / GIB:9.1f} "
                         f"{ratio:6.2f}  {row.get('reason', '')[:90]}")
            if row["status"] != "ok":
                bad.append(f"{label}: {row['status']}: {row.get('reason')}")
            elif not est or not peak:
                bad.append(f"{label}: no estimate or no peak in the row")
            elif not LOW * peak - BELOW_BYTES <= est <= HIGH * peak + SLACK_BYTES:
                bad.append(f"{label}: estimate {est / GIB:.1f} GiB vs peak {peak / GIB:.1f} GiB "
                           f"(allowed {LOW} x peak - 256 MiB .. {HIGH} x peak + 1 GiB)")
    finally:
        close_rank(ctx)
    print(f"\nmemory plans on {name}:\n" + "\n".join(lines))
    assert not bad, "\n".join(bad)
