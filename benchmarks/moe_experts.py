"""The MoE expert step alone on one GPU: grouped_mm, loop and our fused Triton kernel against the roofline.

    python benchmarks/moe_experts.py [--models deepseek-v3 qwen3-235b-a22b] [--phases decode prefill]
        [--gemms grouped_mm loop fused] [--json out.json]

Prints one row per (model, phase, GEMM path): median time, roofline, percent of the roofline,
HBM TB/s and TFLOP/s reached, and `wrong` (rows off the torch reference). Set
COMMBENCH_MOE_TUNE_VERBOSE=1 to see every fused configuration tried.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

from commbench.families.moe.expert_bench import phase_tokens, rows_for
from commbench.families.moe.presets import MODELS, PHASE_TOKENS

COLUMNS = ("model", "tokens", "pairs", "gemm", "time_us", "single_call_us", "roofline_us", "pct_of_roofline", "bound",
           "hbm_tbps", "tflops", "sm_clock_mhz", "wrong")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["deepseek-v3", "qwen3-235b-a22b"], choices=list(MODELS))
    ap.add_argument("--phases", nargs="+", default=["decode", "prefill"], choices=list(PHASE_TOKENS))
    ap.add_argument("--gemms", nargs="+", default=["grouped_mm", "loop", "fused"],
                    choices=["grouped_mm", "loop", "fused"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    rows = []
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print("\t".join(COLUMNS))
    for phase in args.phases:
        for model in args.models:
            for row in rows_for(model, phase_tokens(phase), args.gemms, iters=args.iters):
                row["phase"] = phase
                rows.append(row)
                print("\t".join(str(row[c]) for c in COLUMNS), row["tuned"] or "", flush=True)
    if rows:
        print(f"# gpu: {rows[0]['gpu']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
