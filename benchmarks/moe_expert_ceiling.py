"""How close can a grouped expert step come to its roofline on this card? The measured ceiling.

    python benchmarks/moe_expert_ceiling.py [--models qwen3-235b-a22b deepseek-v3] [--phases prefill]
        [--iters 20] [--json out.json] [--md out.md]

The expert step's roofline (commbench/families/moe/expert_roofline.py) is max(weight and
activation bytes / HBM peak, FLOPs / dense tensor-core peak). At prefill both terms are close
(qwen3-235b-a22b at 4,096 tokens: 4.8 GB of weights and 1.24 TFLOP), so a kernel reaches the
roofline only if it streams the weights at the HBM peak and keeps the tensor cores at theirs,
at once. This script measures what the card gives each half on its own, with the same bytes
and the same FLOPs as the grouped step:

- ``dense_cublas``: the step's FLOPs as one dense SwiGLU MLP (every row through one expert's
  weights: two cuBLAS GEMMs through torch), so no grouping, no padding and weights read once;
- ``dense_fused``: the same dense problem through our Triton kernel (one expert, every row);
- ``weight_read``: every touched expert's w13 and w2 read once (a reduction over them), the
  step's bytes at the HBM rate a plain streaming kernel gets;
- ``grouped_mm`` and ``fused``: the grouped step itself (torch._grouped_mm; ours).

``ceiling_pct`` = roofline / max(dense_cublas, weight_read): the best a grouped kernel could
reach if it overlapped the two perfectly at the rates measured here. ``pct_of_ceiling`` of a
grouped row = ceiling time / its time. Every path is checked against the per-expert torch
reference (``wrong``: rows off by more than the BF16 tolerance; the read is checked against a
float64 sum on the host of a sample).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

GROUPED = ("grouped_mm", "fused")   # the grouped step's paths (benchmarks/moe_experts.py's)
COLUMNS = ("model", "phase", "tokens", "path", "time_us", "tflops", "hbm_tbps", "pct_of_roofline",
           "pct_of_ceiling", "wrong")


def ceiling(roofline_us: float, times_us: dict[str, float]) -> dict:
    """The measured ceiling of a step whose roofline is ``roofline_us``, from the dense GEMM and
    the weight read alone: {ceiling_us, ceiling_pct, limited_by}."""
    parts = {k: times_us[k] for k in ("dense_cublas", "weight_read") if times_us.get(k)}
    if not parts:
        return {"ceiling_us": None, "ceiling_pct": None, "limited_by": None}
    limited_by = max(parts, key=parts.get)
    c = parts[limited_by]
    return {"ceiling_us": c, "ceiling_pct": 100.0 * roofline_us / c, "limited_by": limited_by}


def pct_of_ceiling(ceiling_us: float | None, time_us: float) -> float | None:
    return None if not ceiling_us or time_us <= 0 else 100.0 * ceiling_us / time_us


def measure(model: str, phase: str, iters: int, device: str = "cuda") -> tuple[list[dict], dict]:
    import torch

    from commbench.families.moe.expert_bench import grouped_rows, rows_for, shape_of
    from commbench.families.moe.expert_roofline import device_limits, expert_roofline
    from commbench.families.moe.presets import PHASE_TOKENS

    tokens = PHASE_TOKENS[phase]
    shape = shape_of(model)
    H, I = shape["hidden"], shape["intermediate"]
    counts = grouped_rows(shape, tokens)
    pairs, touched = sum(counts), sum(1 for c in counts if c)
    hbm_gbps, peak, gpu = device_limits(device)
    bound = expert_roofline(counts, H, I, hbm_gbps, peak)
    rows = []

    def add(path: str, t: float, flops: float, nbytes: float, wrong: int, tuned: dict | None = None) -> None:
        rows.append({"model": model, "phase": phase, "tokens": tokens, "path": path, "time_us": round(t, 1),
                     "tflops": round(flops / t / 1e6, 1), "hbm_tbps": round(nbytes / t / 1e6, 2),
                     "pct_of_roofline": round(bound.pct_of(t), 1), "wrong": wrong, "gpu": gpu,
                     "tuned": tuned or {}})

    # the grouped step: the same rows as benchmarks/moe_experts.py (the fused kernel's tiles kept)
    for r in rows_for(model, tokens, list(GROUPED), device=device, iters=iters):
        add(r["gemm"], r["time_us"], bound.flops, bound.bytes, r["wrong"], r.get("tuned"))
    _dense_rows(add, pairs, H, I, bound.flops, iters, device)
    torch.cuda.empty_cache()
    _read_row(add, touched, H, I, iters, device)
    torch.cuda.empty_cache()
    times = {r["path"]: r["time_us"] for r in rows}
    ceil = ceiling(bound.roofline_us, times)
    for r in rows:
        if r["path"] in GROUPED:
            p = pct_of_ceiling(ceil["ceiling_us"], r["time_us"])
            r["pct_of_ceiling"] = None if p is None else round(p, 1)
        else:
            r["pct_of_ceiling"] = None
    summary = {"model": model, "phase": phase, "tokens": tokens, "pairs": pairs, "touched": touched,
               "roofline_us": round(bound.roofline_us, 1), "bound": bound.bound,
               "hbm_us": round(bound.hbm_us, 1), "compute_us": round(bound.compute_us, 1),
               "hbm_gbps": hbm_gbps, "peak_tflops": peak, "gpu": gpu,
               **{k: (round(v, 1) if isinstance(v, float) else v) for k, v in ceil.items()}}
    return rows, summary


def _dense_rows(add, pairs: int, H: int, I: int, flops: float, iters: int, device) -> None:
    """The step's FLOPs as one dense MLP: every row through expert 0's weights, cuBLAS and ours."""
    import torch
    import torch.nn.functional as F

    from commbench.families.moe.expert_bench import reference, time_us
    from commbench.families.moe.experts import LocalExperts, swiglu
    from commbench.families.moe.layer_ref import BF16_TOKEN_RTOL, token_errors
    from commbench.families.moe.reference import make_tokens

    dense = LocalExperts(0, 1, H, I, device, "fused")
    x = make_tokens(0, pairs, H, device)
    ends = torch.tensor([pairs], dtype=torch.int32, device=device)
    want = reference(dense, x, [pairs])
    nbytes = 3 * H * I * 2 + 2 * pairs * H * 2
    for path, fn in (("dense_cublas", lambda: F.linear(swiglu(F.linear(x, dense.w13[0])), dense.w2[0])),
                     ("dense_fused", lambda: dense.forward(x, ends))):
        got = fn()
        torch.cuda.synchronize()
        wrong = int((~(token_errors(got, want) <= BF16_TOKEN_RTOL)).sum())
        t, _single = time_us(fn, iters)
        add(path, t, flops, nbytes, wrong)


def _read_row(add, touched: int, H: int, I: int, iters: int, device) -> None:
    """The step's weight bytes read once: `touched` experts' w13 and w2 summed (known values)."""
    import torch

    from commbench.families.moe.expert_bench import time_us

    w13 = torch.ones(touched, 2 * I, H, dtype=torch.bfloat16, device=device)
    w2 = torch.ones(touched, H, I, dtype=torch.bfloat16, device=device)
    w13[:, 0, 0] = 3.0

    def read():
        return w13.sum(dtype=torch.float32), w2.sum(dtype=torch.float32)

    got = [float(v) for v in read()]
    expect = (w13.numel() + 2 * touched, w2.numel())
    wrong = sum(int(abs(g - e) > 1e-3 * e) for g, e in zip(got, expect))
    t, _single = time_us(read, iters)
    add("weight_read", t, 0.0, 3 * touched * H * I * 2, wrong)


def summary_table(summaries: list[dict]) -> list[str]:
    """One line per model and phase: the roofline, its two terms, the ceiling and what sets it."""
    lines = ["| model | phase | roofline_us (bound) | HBM / compute us | ceiling_us (limited by) "
             "| ceiling % of roofline |", "|" + " --- |" * 6]
    for s in summaries:
        lines.append(f"| {s['model']} | {s['phase']} | {s['roofline_us']} ({s['bound']}) | {s['hbm_us']} / "
                     f"{s['compute_us']} | {s['ceiling_us']} ({s['limited_by']}) | {s['ceiling_pct']} |")
    return lines


def row_table(rows: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(c) is None else str(r.get(c)) for c in COLUMNS) + " |")
    return lines


def verdicts(rows: list[dict], summaries: list[dict], targets: dict[str, float]) -> list[str]:
    """Per model and phase: the best correct grouped kernel against the ceiling and the phase's
    target (``targets``: phase -> % of the roofline, the anchors' EXPERT_PCT_MIN)."""
    out = []
    for s in summaries:
        grouped = [r for r in rows if (r["model"], r["phase"]) == (s["model"], s["phase"])
                   and r["path"] in GROUPED and not r["wrong"]]
        if not grouped:
            out.append(f"**{s['model']} {s['phase']}: no correct grouped row.**")
            continue
        best = max(grouped, key=lambda r: r["pct_of_roofline"])
        target = targets.get(s["phase"])
        reach = "" if target is None else "; a {:.0f} % target is {}".format(
            target, "within the ceiling" if s["ceiling_pct"] and s["ceiling_pct"] >= target
            else "above the ceiling measured here")
        out.append(f"**{s['model']} {s['phase']}: ceiling {s['ceiling_pct']} % of the roofline (set by "
                   f"{s['limited_by']}); best grouped kernel {best['path']} {best['pct_of_roofline']} % "
                   f"({best.get('pct_of_ceiling')} % of the ceiling){reach}.**")
    return out


def markdown(rows: list[dict], summaries: list[dict], when: str) -> str:
    gpu = summaries[0]["gpu"] if summaries else "-"
    lines = [f"# Expert step: the measured ceiling on {gpu} ({when} UTC)", "", *summary_table(summaries), "",
             *row_table(rows)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["qwen3-235b-a22b", "deepseek-v3"])
    ap.add_argument("--phases", nargs="+", default=["prefill"], choices=["prefill", "decode"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    when = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
    rows, summaries = [], []
    print("\t".join(COLUMNS))
    for phase in args.phases:
        for model in args.models:
            got, summary = measure(model, phase, args.iters)
            rows += got
            summaries.append(summary)
            for r in got:
                print("\t".join(str(r.get(c)) for c in COLUMNS), flush=True)
            print(f"# {model} {phase}: roofline {summary['roofline_us']} us ({summary['bound']}), ceiling "
                  f"{summary['ceiling_us']} us = {summary['ceiling_pct']}% (limited by {summary['limited_by']})",
                  flush=True)
    text = markdown(rows, summaries, when)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"when_utc": when, "summaries": summaries, "rows": rows}, f, indent=1)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
