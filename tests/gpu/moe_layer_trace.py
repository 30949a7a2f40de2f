"""Record one profiled MoE layer batch (1 rank, small shape) and keep its torch.profiler trace,
cut to what layer_timeline reads, as a CPU test fixture; print the split it gives.

    python3 tests/gpu/moe_layer_trace.py OUT.json [BACKEND] [OVERLAP]
"""
from __future__ import annotations

import json
import sys

from commbench.families import get_family
from commbench.families.moe import layer_profile, layer_timeline
from tests.gpu.test_moe_layer_gpu import close, make_case, make_ctx

KEEP_CATS = ("user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")


def cut(events: list[dict]) -> list[dict]:
    """The events layer_timeline reads, with only the args it reads."""
    gpu = {(e.get("args") or {}).get("correlation") for e in events
           if e.get("cat") in layer_timeline.GPU_CATS}
    out = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if e.get("ph") != "X" or cat not in KEEP_CATS:
            continue
        if cat == "user_annotation" and not str(e.get("name", "")).startswith("commbench."):
            continue
        if cat in layer_timeline.LAUNCH_CATS and args.get("correlation") not in gpu:
            continue
        keep = {k: args[k] for k in ("correlation", "stream") if k in args}
        out.append({"ph": "X", "cat": cat, "name": e["name"], "ts": e["ts"], "dur": e.get("dur", 0),
                    "args": keep})
    return out


def main(out_path: str, backend: str = "nccl_a2a", overlap: str = "two_batch") -> None:
    seen = []
    real = layer_profile._events
    layer_profile._events = lambda prof: seen.append(real(prof)) or seen[-1]
    ctx = make_ctx()
    fam = get_family("moe")
    case = make_case(backend, overlap=overlap, tokens=256, iters=3)
    state = fam.setup(case, ctx)
    try:
        state.measure(case.warmup, case.iters)
        wrong = fam.check(state)
    finally:
        fam.teardown(state)
    close(ctx)
    with open(out_path, "w") as fh:
        json.dump({"traceEvents": cut(seen[-1])}, fh)
    cols = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in state.extra.items()
            if k.endswith(("_us", "_pct", "_note")) or k in ("slowest_rank",)}
    print(backend, overlap, "wrong", wrong, cols)
    kinds = {}
    for iv in (state.timeline or {}).get("intervals", []):
        kinds.setdefault((iv.get("region"), iv["kind"]), set()).add(iv["name"][:40])
    for key, names in sorted(kinds.items(), key=str):
        print(" ", key, sorted(names)[:4])


if __name__ == "__main__":
    main(*sys.argv[1:])
