"""Sweep of the fused MoE expert kernel's launch options in one GPU call (prefill and decode).

    python benchmarks/moe_fused_sweep.py [--models ...] [--budget-s 170]

Per model (all experts local, the family's routing, one rank): the decode row with the
pinned decode tiles, then each prefill variant (row blocks: attached rows or tails; TMA) with its
time, percent of the roofline, TB/s, useful and executed (padded) TFLOP/s, the two kernels'
own times and `wrong` against the per-expert torch reference; then torch._grouped_mm and a
dense torch.mm with the same FLOPs (the practical tensor-core ceiling of this GPU). Variants
are tried in order while the time budget lasts (Triton compiles each on first use).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from commbench.families.moe.expert_bench import grouped_rows, reference, shape_of, time_us
from commbench.families.moe.expert_roofline import device_limits, expert_roofline
from commbench.families.moe.experts import LocalExperts
from commbench.families.moe.fused_moe_blocks import expert_blocks
from commbench.families.moe.fused_moe_config import Config
from commbench.families.moe.fused_moe_triton import FusedExperts, moe_gemm, pack_pairs
from commbench.families.moe.layer_ref import BF16_TOKEN_RTOL, token_errors
from commbench.families.moe.presets import PHASE_TOKENS
from commbench.families.moe.reference import make_tokens


def _pair(up: Config, down: Config = Config(128, 256, 64, 8, 3), **kw) -> tuple[Config, Config]:
    """gate/up and down configurations of one variant, both with the options in kw."""
    from dataclasses import replace

    return replace(up, **kw), replace(down, **kw)


UP = Config(128, 128, 64, 8, 3)
T32 = {"tail_m": 32}
PP = {"pair": 2, "tma": True}
PREFILL_VARIANTS = (   # most telling first: the budget may cut the end of the list
    ("t32-tma", _pair(UP, tail_m=32, tma=True)),
    ("t32-pp-tma-s4", (Config(128, 128, 64, 8, 4, **PP, **T32), Config(128, 256, 64, 8, 4, tma=True, **T32))),
    ("t32-pp-tma-s4/down-ptr", (Config(128, 128, 64, 8, 4, **PP, **T32), Config(128, 256, 64, 8, 4, **T32))),
    ("t32-pp-tma-bk128", (Config(128, 128, 128, 8, 2, **PP, **T32),
                          Config(128, 256, 128, 8, 2, tma=True, **T32))),
    ("t16-pp-tma-s4", (Config(128, 128, 64, 8, 4, **PP, tail_m=16), Config(128, 256, 64, 8, 4, tma=True, tail_m=16))),
    ("a32-t32-pp-tma-s4", (Config(128, 128, 64, 8, 4, **PP, attach_m=32, **T32),
                           Config(128, 256, 64, 8, 4, tma=True, attach_m=32, **T32))),
    ("a32-pp-tma-s4", (Config(128, 128, 64, 8, 4, **PP, attach_m=32),
                       Config(128, 256, 64, 8, 4, tma=True, attach_m=32))),
    ("a32-pg-s4", (Config(128, 128, 64, 8, 4, pair=1, attach_m=32),
                   Config(128, 256, 64, 8, 4, attach_m=32))),
    ("t32-pg-s4", (Config(128, 128, 64, 8, 4, pair=1, **T32), Config(128, 256, 64, 8, 4, **T32))),
    ("t32-pp-tma-s4/down-bn128-s4", (Config(128, 128, 64, 8, 4, **PP, **T32),
                                     Config(128, 128, 64, 8, 4, tma=True, **T32))),
    ("t32-pp-tma-s4/down-bk32-s6", (Config(128, 128, 64, 8, 4, **PP, **T32),
                                    Config(128, 256, 32, 8, 6, tma=True, **T32))),
)
DECODE_PINNED = {   # the tuner's decode choices on the H200 (2026-12-03)
    "deepseek-v3": (Config(16, 32, 256, 4, 4), Config(16, 128, 128, 4, 4)),
    "qwen3-235b-a22b": (Config(16, 128, 128, 4, 3), Config(16, 128, 128, 4, 4)),
}
COLUMNS = ("model", "phase", "variant", "time_us", "single_us", "gate_up_us", "down_us",
           "roofline_us", "pct", "hbm_tbps", "tflops", "exec_tflops", "wrong", "configs")


def _event_us(fn, iters: int = 5) -> float:
    """Mean per call over ``iters`` calls back to back (expert_bench.time_us, one warm-up)."""
    return time_us(fn, iters, warmup=1)[0]


def _row(model, phase, variant, experts, xe, ends, counts, want, bound, H, I, cfgs):
    up, down = cfgs
    experts.fused = FusedExperts(experts.w13, experts.w2)
    experts.fused.chosen = {("gate_up", xe.shape[0]): up, ("down", xe.shape[0]): down}
    experts.gemm = "fused"
    got = experts.forward(xe, ends)
    wrong = int((~(token_errors(got, want) <= BF16_TOKEN_RTOL)).sum())
    t, single = time_us(lambda e=experts, x=xe, n=ends: e.forward(x, n), iters=5, warmup=1)
    w13 = experts.fused.weights_for(up)
    h = moe_gemm(xe, w13, ends, True, up)
    up_us = _event_us(lambda: moe_gemm(xe, w13, ends, True, up))
    down_us = _event_us(lambda: moe_gemm(h, experts.w2, ends, False, down))
    padded = sum(n for r in counts for _, n in expert_blocks(r, up.block_m, up.tail, up.attach_m))
    return {"model": model, "phase": phase, "variant": variant, "time_us": round(t, 1),
            "single_us": round(single, 1), "gate_up_us": round(up_us, 1), "down_us": round(down_us, 1),
            "roofline_us": f"{bound.roofline_us:.1f} ({bound.bound})", "pct": round(bound.pct_of(t), 1),
            "hbm_tbps": round(bound.bytes / t / 1e6, 2), "tflops": round(bound.flops / t / 1e6, 1),
            "exec_tflops": round(6.0 * H * I * padded / t / 1e6, 1), "wrong": wrong,
            "configs": f"gate_up {up.label()}, down {down.label()}"}


def _print(row):
    print("\t".join(str(row.get(c, "")) for c in COLUMNS), flush=True)


def _triton_dense(model, pairs, H, I):
    """Our kernel on one expert holding every row: the Triton loop's rate with no grouping."""
    x = make_tokens(0, pairs, H, "cuda")
    w13 = (torch.randn(1, 2 * I, H, device="cuda") / 8).to(torch.bfloat16)
    w2 = (torch.randn(1, H, I, device="cuda") / 8).to(torch.bfloat16)
    ends = torch.tensor([pairs], device="cuda", dtype=torch.int32)
    h = torch.randn(pairs, I, device="cuda").to(torch.bfloat16)
    for up, down in ((Config(128, 128, 64, 8, 3, tma=True), Config(128, 256, 64, 8, 3, tma=True)),
                     (Config(128, 128, 64, 8, 4, pair=1), Config(128, 256, 64, 8, 4)),
                     (Config(128, 128, 64, 8, 4, pair=2, tma=True), Config(128, 128, 64, 8, 3))):
        try:
            w = pack_pairs(w13) if up.pair == 2 else w13
            up_us = _event_us(lambda: moe_gemm(x, w, ends, True, up), 10)
            down_us = _event_us(lambda: moe_gemm(h, w2, ends, False, down), 10)
        except Exception as exc:  # noqa: BLE001
            print(f"# triton dense {up.label()}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        f_up, f_down = 4.0 * H * I * pairs, 2.0 * H * I * pairs
        print(f"# triton dense {model}: gate_up {up.label()} {up_us:.0f} us "
              f"({f_up / up_us / 1e6:.0f} TFLOP/s), down {down.label()} {down_us:.0f} us "
              f"({f_down / down_us / 1e6:.0f} TFLOP/s)", flush=True)


def _dense_ceiling(model, pairs, H, I, peak):
    """torch.mm with the expert step's useful FLOPs in two dense GEMMs (one weight each)."""
    x = make_tokens(0, pairs, H, "cuda")
    w13 = torch.randn(2 * I, H, device="cuda").to(torch.bfloat16)
    w2 = torch.randn(H, I, device="cuda").to(torch.bfloat16)
    h = torch.randn(pairs, I, device="cuda").to(torch.bfloat16)
    up_us = _event_us(lambda: torch.mm(x, w13.t()), 10)
    down_us = _event_us(lambda: torch.mm(h, w2.t()), 10)
    flops = 6.0 * H * I * pairs
    tf = flops / (up_us + down_us) / 1e6
    print(f"# dense ceiling {model}: torch.mm [{pairs}x{H}]x[{H}x{2 * I}] {up_us:.0f} us + "
          f"[{pairs}x{I}]x[{I}x{H}] {down_us:.0f} us = {up_us + down_us:.0f} us, {tf:.0f} TFLOP/s "
          f"({100 * tf / peak:.1f}% of {peak:.0f})", flush=True)


def sweep(model: str, deadline: float, only=None) -> None:
    shape = shape_of(model)
    H, I, E = shape["hidden"], shape["intermediate"], shape["experts"]
    hbm, peak, _ = device_limits("cuda")
    t0 = time.time()
    experts = LocalExperts(0, E, H, I, "cuda", "loop")
    print(f"# {model}: weights built in {time.time() - t0:.1f} s", flush=True)
    pinned = DECODE_PINNED[model]
    # TMA at decode last: a variant that fails hard (ends the process) costs only what follows
    prefill = [v for v in PREFILL_VARIANTS if not only or v[0] in only]
    plan = (("decode", [("pinned", pinned)]), ("prefill", prefill),
            ("decode", [("pinned-tma", _pair(*pinned, tma=True))]))
    baselines_done = False
    for phase, variants in plan:
        counts = grouped_rows(shape, PHASE_TOKENS[phase])
        pairs = sum(counts)
        bound = expert_roofline(counts, H, I, hbm, peak)
        xe = make_tokens(0, pairs, H, "cuda")
        ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        want = reference(experts, xe, counts)
        for name, cfgs, *only in variants:
            if only and model not in only[0]:
                continue
            if time.time() > deadline:
                print(f"# {model} {phase} {name}: skipped (time budget)", flush=True)
                continue
            t1 = time.time()
            try:
                row = _row(model, phase, name, experts, xe, ends, counts, want, bound, H, I, cfgs)
                _print(row)
            except Exception as exc:  # noqa: BLE001 - one variant failing must not end the sweep
                print(f"# {model} {phase} {name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            print(f"#   ({time.time() - t1:.1f} s with compiles)", flush=True)
        if phase == "prefill" and not baselines_done:
            baselines_done = True
            experts.gemm = "grouped_mm"
            t, _ = time_us(lambda e=experts, x=xe, n=ends: e.forward(x, n), iters=5, warmup=1)
            print(f"# {model} prefill torch._grouped_mm: {t:.0f} us, {bound.pct_of(t):.1f}% of "
                  f"roofline, {bound.flops / t / 1e6:.0f} TFLOP/s", flush=True)
            _dense_ceiling(model, pairs, H, I, peak)
            _triton_dense(model, pairs, H, I)
        del xe, want
    del experts
    torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["deepseek-v3", "qwen3-235b-a22b"])
    ap.add_argument("--budget-s", type=float, default=170.0)
    ap.add_argument("--only", nargs="+", help="prefill variants to run (default: all)")
    args = ap.parse_args(argv)
    start = time.time()
    print("\t".join(COLUMNS))
    for i, model in enumerate(args.models):
        # the first model (which compiles the kernels) may use 55% of the budget, the last the rest
        share = args.budget_s * (0.55 if i + 1 < len(args.models) else 1.0)
        sweep(model, start + share, args.only)
    print(f"# gpu: {torch.cuda.get_device_name()}, torch {torch.__version__}, total "
          f"{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
