"""Low-latency dispatch variants side by side (COMMBENCH_MOE_LL_DISPATCH: plain, flat, staged):
kernel time at one rank (torch profiler device time, the variants alternating in one profiled
loop) and the check of every variant at 1, 2 or 4 ranks sharing one GPU. flat_send_only (the
flat rows without their release) is timed, never checked.

    python3 tests/gpu/moe_ll_dispatch_ab.py OUT.jsonl                     # times and checks
    mpirun -np 4 python3 tests/gpu/moe_ll_dispatch_ab.py OUT.jsonl --check-only --shapes deepseek-v3
    python3 tests/gpu/moe_ll_dispatch_ab.py --table OUT.jsonl DEEPEP.jsonl   # Markdown table

Before each variant's check the receive rows are overwritten with 0xFF bytes, so a row the
variant did not write is counted wrong (not left over from the variant before it). DEEPEP.jsonl
is what `benchmarks/moe_ll_vs_deepep.py --worker deepep --jsonl DEEPEP.jsonl` writes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TRANSPORTS = {"ipc": "ipc_ll", "nvshmem": "nvshmem_ll"}
# moe::ll_dispatch<Transport, variant>, demangled or not
KERNEL_VARIANT = re.compile(r"ll_dispatch(?:<[^,<>]*,\s*|I\w+?Li)(\d+)")


def kernel_us_by_variant(st, variants: list[str], iters: int) -> dict[str, float]:
    """Median device time of each variant's dispatch kernel, the variants alternating, each
    dispatch followed by the default combine (as the benchmark's dispatch + combine pairs)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from commbench.families.moe import peer

    named = {**peer.DISPATCH_VARIANTS, **peer.DISPATCH_PARTS}
    codes = {named[v]: v for v in variants}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            for v in variants:
                st.dispatch_variant.value = named[v]
                st.dispatch()
                st.combine()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for ev in prof.events():
        m = KERNEL_VARIANT.search(ev.name) if ev.device_type == DeviceType.CUDA else None
        if m and int(m.group(1)) in codes:   # a variant that fell back runs another kernel: not its time
            times[codes[int(m.group(1))]].append(ev.time_range.elapsed_us())
    return {v: statistics.median(t) for v, t in times.items() if t}


def scrub_rows(st, sizes: dict[str, int]) -> None:
    """Every receive row, FP8 scale and source index of this rank set to 0xFF bytes."""
    import torch

    for field in ("ll_recv_x", "ll_recv_scales", "ll_recv_src"):
        size = sizes[field]
        if size:
            st.write(field, torch.full((size,), 0xFF, dtype=torch.uint8, device=st.device))


def emit(out: str, rec: dict) -> None:
    print(json.dumps(rec), flush=True)
    with open(out, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def one_state(ctx, p, shape, transport, handle, variants, iters, check_only, out) -> int:
    import torch

    from commbench.families.moe import peer
    from commbench.families.moe.peer_check import check
    from moe_ll_workers import TOKENS

    kw = {"transport": "nvshmem", "handle": handle} if transport == "nvshmem" else {}
    st = peer.PeerState(p, "round_trip", "ll", ctx.world.comm, ctx.device, TOKENS, **kw)
    sizes = peer.workspace_sizes(p, "ll", st.max_tokens, transport == "nvshmem")
    base = {"impl": TRANSPORTS[transport], "shape": shape, "dtype": p.dtype, "ranks": p.ranks,
            "sms": p.num_sms}
    bad = 0
    try:
        with torch.cuda.device(st.device), torch.cuda.stream(st.stream):
            times = {}
            if not check_only:
                for v in variants:   # warm each
                    st.dispatch_variant.value = {**peer.DISPATCH_VARIANTS, **peer.DISPATCH_PARTS}[v]
                    for _ in range(3):
                        st.run()
                times = kernel_us_by_variant(st, variants, iters)
            for v in variants:
                if v not in peer.DISPATCH_VARIANTS:   # a part: its output is incomplete
                    if ctx.world.rank == 0 and v in times:
                        emit(out, {**base, "variant": v, "dispatch_kernel_us": times[v]})
                    continue
                st.dispatch_variant.value = peer.DISPATCH_VARIANTS[v]
                scrub_rows(st, sizes)
                st.sync()
                try:
                    wrong = ctx.world.allgather(int(check(st)))
                except Exception as exc:   # a timed-out wait: say which, then stop
                    print(json.dumps({**base, "variant": v, "error": repr(exc)[:300]}), flush=True)
                    raise
                bad += any(wrong)
                if ctx.world.rank == 0:
                    emit(out, {**base, "variant": v, "dispatch_kernel_us": times.get(v),
                               "wrong": sum(wrong), "calc_diff": st.extra.get("calc_diff")})
    finally:
        st.close()
    return bad


def run(args) -> int:
    os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", "6G")
    import torch

    from commbench.comm import nvshmem as boot
    from commbench.families.moe.problem import make_problem
    from commbench.measure.standalone import close_rank, open_rank
    from moe_ll_workers import DTYPES, TOKENS, params

    ctx = open_rank()
    bad = 0
    try:
        torch.cuda.set_device(torch.device(ctx.device))
        all_sms = torch.cuda.get_device_properties(ctx.device).multi_processor_count
        for transport in args.transports.split(","):
            handle = boot.ensure(ctx) if transport == "nvshmem" else None
            # (blocks, shapes, check only): the measured runs, then the checks at few blocks
            plans = [(args.sms or all_sms, args.shapes, args.check_only)]
            plans += [(int(n), args.few_shapes, True) for n in args.few_sms.split(",") if n]
            for sms, shapes, check_only in plans:
                for shape in shapes.split(","):
                    for dtype in DTYPES:
                        prm = params(shape, sms)
                        p = make_problem(TOKENS * prm["hidden"] * 2, prm, ctx.world.rank,
                                         ctx.world.size, dtype)
                        bad += one_state(ctx, p, shape, transport, handle, args.variants.split(","),
                                         args.iters, check_only, args.out)
    finally:
        close_rank(ctx)
    return 1 if bad else 0


def table(paths: list[str]) -> str:
    recs = [json.loads(line) for path in paths if Path(path).exists()
            for line in Path(path).read_text().splitlines() if line.strip()]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"   # noqa: E731
    timed = [r for r in recs if r["ranks"] == 1 and r.get("dispatch_kernel_us") is not None]
    keys = list(dict.fromkeys((r["shape"], r["dtype"]) for r in timed))
    cols = list(dict.fromkeys((r["impl"], r["variant"]) for r in timed))
    lines = ["| shape | dtype | " + " | ".join(f"{i} {v}" for i, v in cols) + " |",
             "|" + " --- |" * (len(cols) + 2)]
    for shape, dtype in keys:
        got = {(r["impl"], r["variant"]): r["dispatch_kernel_us"] for r in timed
               if (r["shape"], r["dtype"]) == (shape, dtype)}
        lines.append(f"| {shape} | {dtype} | " + " | ".join(fmt(got.get(c)) for c in cols) + " |")
    lines += ["", "| ranks | blocks | impl | variant | shape | dtype | wrong | calc_diff |",
              "|" + " --- |" * 8]
    for r in recs:
        if "wrong" in r:
            lines.append(f"| {r['ranks']} | {r.get('sms', '-')} | {r['impl']} | {r['variant']} | "
                         f"{r['shape']} | {r['dtype']} | {r['wrong']} | "
                         f"{r.get('calc_diff') or 0:.1e} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="JSON lines, appended")
    ap.add_argument("--shapes", default="deepseek-v3,qwen3-235b-a22b,mixtral-8x7b,h6144-e128")
    ap.add_argument("--transports", default="ipc,nvshmem")
    ap.add_argument("--variants", default="plain,flat")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--sms", type=int, default=0, help="blocks per launch (0: every SM)")
    ap.add_argument("--few-sms", default="", help="then checks only with these block counts "
                    "(e.g. 8: each warp of the flat dispatch takes several units)")
    ap.add_argument("--few-shapes", default="deepseek-v3,mixtral-8x7b")
    ap.add_argument("--table", nargs="+", metavar="JSONL", help="print the Markdown table and stop")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
