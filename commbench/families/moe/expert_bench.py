"""The expert step alone at one rank: each GEMM path timed against its roofline and checked.

Every expert of the model is local (one rank), the rows are grouped by expert
as the layer's pack leaves them, and the routing is the family's (presets and
seed as a layer Case would draw them). ``wrong`` counts output rows whose
relative L2 error against the per-expert torch reference (expert_forward over
each group) exceeds the layer's BF16 tolerance. ``time_us`` is the mean of calls
enqueued back to back (``single_call_us``: the median of calls timed one by one).
"""
from __future__ import annotations

import statistics

import torch

from . import routing as routing_mod
from .expert_roofline import device_limits, expert_roofline
from .experts import LocalExperts, expert_forward
from .layer_ref import BF16_TOKEN_RTOL, token_errors
from .presets import MODELS, PHASE_TOKENS
from .reference import make_tokens

ROUTING_DEFAULTS = {"routing": "random", "seed": 0, "n_group": 8, "topk_group": 4, "zipf_s": 1.2}


def shape_of(model: str) -> dict:
    return {**ROUTING_DEFAULTS, **MODELS[model]}


def grouped_rows(shape: dict, tokens: int) -> list[int]:
    """Rows each expert receives from `tokens` tokens at one rank (the family's routing)."""
    routed = routing_mod.for_case(shape, tokens, 1)
    return [int(c) for c in routed.tokens_per_expert().tolist()]


def reference(experts: LocalExperts, xe: torch.Tensor, counts: list[int]) -> torch.Tensor:
    out = torch.empty_like(xe)
    start = 0
    for e, n in enumerate(counts):
        if n:
            out[start:start + n] = expert_forward(xe[start:start + n], experts.w13[e], experts.w2[e])
        start += n
    return out


def time_us(fn, iters: int, warmup: int = 2, during=None) -> tuple[float, float]:
    """(mean per call over `iters` calls enqueued back to back, median of calls timed one by one)
    from CUDA events. Back to back, the host enqueues a call while the previous one runs, as in a
    model's forward; one by one, each time also holds the host's launch of its first kernel.
    ``during``: called once after the back-to-back calls (and the end event) are enqueued,
    while they run."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    if during is not None:   # after the end event is queued: its host time is not in the window
        during()
    b.synchronize()
    batched = a.elapsed_time(b) * 1e3 / iters
    single = []
    for _ in range(iters):
        a.record()
        fn()
        b.record()
        b.synchronize()
        single.append(a.elapsed_time(b) * 1e3)
    return batched, statistics.median(single)


def sm_clock_mhz(device="cuda") -> int | None:
    """The GPU's SM clock now (NVML through torch), or None where it cannot be read. A
    compute-bound kernel's time follows it: a GPU held at 1.7 GHz instead of 1.98 is ~14% slower."""
    try:
        return int(torch.cuda.clock_rate(torch.device(device)))
    except Exception:  # noqa: BLE001 - no NVML binding, or a device NVML does not list
        return None


def rows_for(model: str, tokens: int, gemms, device="cuda", iters: int = 10) -> list[dict]:
    """One row per GEMM path for a model's experts at `tokens` tokens per rank."""
    shape = shape_of(model)
    H, I, E = shape["hidden"], shape["intermediate"], shape["experts"]
    counts = grouped_rows(shape, tokens)
    hbm_gbps, peak, gpu = device_limits(device)
    bound = expert_roofline(counts, H, I, hbm_gbps, peak)
    pairs = sum(counts)
    xe = make_tokens(0, pairs, H, device)
    ends = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
    experts = LocalExperts(0, E, H, I, device, gemms[0])
    want = reference(experts, xe, counts)
    rows = []
    for gemm in gemms:
        if gemm == "fused" and experts.fused is None:
            from .fused_moe_triton import FusedExperts

            experts.fused = FusedExperts(experts.w13, experts.w2)
        experts.gemm = gemm   # the same weights under each path
        got = experts.forward(xe, ends)
        torch.cuda.synchronize()
        err = token_errors(got, want)
        wrong = int((~(err <= BF16_TOKEN_RTOL)).sum())
        clock: list = []
        sm_clock_mhz(device)   # NVML's start-up happens here, not while the calls run
        t, single = time_us(lambda e=experts, x=xe: e.forward(x, ends), iters,
                            during=lambda: clock.append(sm_clock_mhz(device)))
        rows.append({"model": model, "tokens": tokens, "pairs": pairs, "gemm": gemm,
                     "time_us": round(t, 1), "single_call_us": round(single, 1),
                     "roofline_us": round(bound.roofline_us, 1),
                     "pct_of_roofline": round(bound.pct_of(t), 1), "bound": bound.bound,
                     "hbm_tbps": round(bound.bytes / t / 1e6, 2),
                     "tflops": round(bound.flops / t / 1e6, 1), "wrong": wrong,
                     "max_row_err": float(err.max()), "gpu": gpu, "sm_clock_mhz": clock[0],
                     "tuned": _tuned(experts) if gemm == "fused" else {}})
    del experts, want, xe
    torch.cuda.empty_cache()
    return rows


def _tuned(experts: LocalExperts) -> dict:
    return {f"{which}@{rows}": cfg.label() for (which, rows), cfg in experts.fused.chosen.items()}


def phase_tokens(phase: str) -> int:
    return PHASE_TOKENS[phase]
