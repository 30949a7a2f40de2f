"""The measuring processes of benchmarks/moe_ll_vs_deepep.py: ours (ipc_ll, nvshmem_ll) and DeepEP's
low-latency mode, each in a process of its own (NVSHMEM comes up once per process, and DeepEP
brings up its own). Every record is one JSON line: kernel times from the torch profiler (the
device duration of each dispatch and combine kernel, launch overhead excluded, as DeepEP's own
tests report them), per-op times from a replayed CUDA graph, and the check.
"""
from __future__ import annotations

import json
import os
import statistics
import time

import torch

SHAPES = {   # name: moe parameters (decode: 128 tokens per rank)
    "deepseek-v3": {"hidden": 7168, "experts": 256, "topk": 8, "routing": "group", "n_group": 8,
                    "topk_group": 4},
    "qwen3-235b-a22b": {"hidden": 4096, "experts": 128, "topk": 8, "routing": "random"},
    "mixtral-8x7b": {"hidden": 4096, "experts": 8, "topk": 2, "routing": "random"},
    "h6144-e128": {"hidden": 6144, "experts": 128, "topk": 8, "routing": "random"},
}
TOKENS = 128   # per rank, unless a shape names its own ("tokens")
DTYPES = ("bfloat16", "float8_e4m3")


def tokens_of(shape: str) -> int:
    return SHAPES[shape].get("tokens", TOKENS)


def params(shape: str, num_sms: int) -> dict:
    base = {"routing": "random", "seed": 1, "n_group": 8, "topk_group": 4, "zipf_s": 1.2,
            "num_sms": num_sms}
    return {**base, **{k: v for k, v in SHAPES[shape].items() if k != "tokens"}}


def kernel_us(run, iters: int) -> dict[str, float]:
    """Mean device time per launch of the dispatch and combine kernels over ``iters`` runs."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                run()
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - no profiler (CUPTI) here: the graph times remain
        print(f"profiler failed: {type(exc).__name__}: {exc}", flush=True)
        torch.cuda.synchronize()
        return {}
    out: dict[str, list[float]] = {"dispatch": [], "combine": []}
    for ev in prof.events():
        if ev.device_type != DeviceType.CUDA or "clean" in ev.name:
            continue
        for op in out:
            if op in ev.name:   # ours: moe::ll_dispatch, moe::ll_combine_*; DeepEP: internode_ll::
                out[op].append(ev.time_range.elapsed_us())
    return {f"{op}_kernel_us": statistics.median(v) if v else None for op, v in out.items()}


def api_us(fn, iters: int) -> float | None:
    """One call as a user's code makes it: the host clock around ``fn()`` and a synchronize, the
    median over ``iters`` calls (launch, Python and the wait included; commbench's api_us)."""
    try:
        times = []
        for _ in range(iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)
    except Exception as exc:  # noqa: BLE001 - optional like the graph: report why not
        print(f"api timing failed: {type(exc).__name__}: {exc}", flush=True)
        torch.cuda.synchronize()
        return None


def graph_us(fn, iters: int) -> float | None:
    """Per-op time of ``iters`` launches of ``fn`` captured in one CUDA graph, replayed."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()   # warm the allocator on this stream
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / iters)
        del g
        return statistics.median(times)
    except Exception as exc:  # noqa: BLE001 - the graph is optional: report why not
        print(f"graph timing failed: {type(exc).__name__}: {exc}", flush=True)
        torch.cuda.synchronize()
        return None


def emit(out_path: str, rec: dict) -> None:
    print(json.dumps(rec), flush=True)
    with open(out_path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def run_ours(ctx, shapes, variants, out_path: str, iters: int, check_only: bool) -> int:
    """ipc_ll then nvshmem_ll over every shape and dtype; ``variants`` of the combine on ipc_ll BF16."""
    from commbench.comm import nvshmem as boot
    from commbench.families.moe import peer
    from commbench.families.moe.peer_check import check
    from commbench.families.moe.problem import make_problem

    world, bad = ctx.world, 0
    handle = None
    for transport in ("ipc", "nvshmem"):
        if transport == "nvshmem":
            handle = boot.ensure(ctx)
        for shape in shapes:
            for dtype in DTYPES:
                prm = params(shape, torch.cuda.get_device_properties(ctx.device).multi_processor_count)
                p = make_problem(tokens_of(shape) * prm["hidden"] * 2, prm, world.rank, world.size, dtype)
                kw = {"transport": "nvshmem", "handle": handle} if transport == "nvshmem" else {}
                extra = variants if transport == "ipc" else []
                bad += _measure_ours(ctx, p, shape, transport, extra, out_path, iters, check_only,
                                     peer, check, kw)
    return bad


def _measure_ours(ctx, p, shape, transport, variants, out_path, iters, check_only, peer, check, kw):
    """One PeerState: the per-expert combine first (its counters follow the combine epochs only
    while it alone has run), then the other variants (combine or dispatch) and the default
    combine's halves alone, the defaults last; then the check (on the defaults)."""
    order = sorted(variants, key=lambda v: v != "per_expert")
    order += list(peer.COMBINE_PARTS) if variants else []   # the default's halves alone
    order.append("default")
    combine = {**peer.COMBINE_VARIANTS, **peer.COMBINE_PARTS}
    default_combine = next(iter(peer.COMBINE_VARIANTS.values()))     # the first is the default
    default_dispatch = next(iter(peer.DISPATCH_VARIANTS.values()))
    st = peer.PeerState(p, "round_trip", "ll", ctx.world.comm, ctx.device, p.tokens, **kw)
    impl = "ipc_ll" if transport == "ipc" else "nvshmem_ll"
    bad = 0
    try:
        with torch.cuda.device(st.device), torch.cuda.stream(st.stream):
            for name in ([] if check_only else order):
                st.variant.value = combine.get(name, default_combine)
                st.dispatch_variant.value = peer.DISPATCH_VARIANTS.get(name, default_dispatch)
                for _ in range(5):
                    st.run()
                rec = kernel_us(st.run, iters)
                if name in ("default", *peer.DISPATCH_VARIANTS):
                    rec["dispatch_graph_us"] = graph_us(st.dispatch, iters)
                    rec["dispatch_api_us"] = api_us(st.dispatch, iters)
                rec["combine_graph_us"] = graph_us(st.combine, iters)
                rec["combine_api_us"] = api_us(st.combine, iters)
                _emit_rank0(ctx, out_path, {"impl": impl, "variant": name, "shape": shape,
                                            "dtype": p.dtype, "ranks": p.ranks, "tokens": p.tokens,
                                            "ll_variant": _label(name, peer), **rec})
            st.variant.value, st.dispatch_variant.value = default_combine, default_dispatch
        try:
            wrong = check(st)
        except Exception as exc:   # a timed-out wait: record it, then stop (the next would wait too)
            _emit_rank0(ctx, out_path, {"impl": impl, "variant": "default", "shape": shape,
                                        "dtype": p.dtype, "ranks": p.ranks, "tokens": p.tokens,
                                        "ll_variant": _label("default", peer), "check": True,
                                        "wrong": None, "error": f"{type(exc).__name__}: {exc}"[:300]})
            raise
        wrongs = ctx.world.allgather(int(wrong))
        bad += any(wrongs)
        _emit_rank0(ctx, out_path, {"impl": impl, "variant": "default", "shape": shape, "dtype": p.dtype,
                                    "ranks": p.ranks, "tokens": p.tokens,
                                    "ll_variant": _label("default", peer), "check": True,
                                    "wrong": sum(wrongs), "calc_diff": st.extra.get("calc_diff")})
    finally:
        st.close()
    return bad


def _label(name: str, peer) -> str:
    """The ll_variant of a timed setting: a dispatch variant with the default combine, a combine
    variant (or half) with the default dispatch, or both defaults."""
    dispatch, combine = next(iter(peer.DISPATCH_VARIANTS)), next(iter(peer.COMBINE_VARIANTS))
    if name in peer.DISPATCH_VARIANTS:
        dispatch = name
    elif name != "default":
        combine = name
    return peer.ll_variant_label(dispatch, combine)


def _emit_rank0(ctx, out_path, rec) -> None:
    if ctx.world.rank == 0:
        emit(out_path, rec)


def deepep_refusals(shapes, ranks: int) -> dict[str, str]:
    """The shapes DeepEP's low-latency kernels cannot take at ``ranks`` ranks (its hidden sizes,
    topk, rank counts: commbench.families.moe.deepep_limits), with DeepEP's reason."""
    from commbench.families.moe.deepep_limits import ll_refusal

    out = {}
    for shape in shapes:
        sh = SHAPES[shape]
        hit = ll_refusal(hidden=sh["hidden"], topk=sh["topk"], experts=sh["experts"], ranks=ranks,
                         tokens=tokens_of(shape))
        if hit:
            out[shape] = hit[1]
    return out


def run_deepep(ctx, shapes, out_path: str, iters: int) -> int:
    """DeepEP's low-latency dispatch/combine at one rank: same routing and inputs as ours. A shape
    DeepEP cannot take is recorded as skipped with its reason, and DeepEP is never called for it."""
    world, bad = ctx.world, 0
    refused = deepep_refusals(shapes, world.size)
    for shape, reason in refused.items():
        for dtype in DTYPES:
            _emit_rank0(ctx, out_path, {"impl": "deepep_ll", "variant": "v1.2.1", "shape": shape, "dtype": dtype,
                                        "ranks": world.size, "tokens": tokens_of(shape), "skipped": reason})
    shapes = [s for s in shapes if s not in refused]
    if not shapes:
        return 0
    import deep_ep

    need = max(deep_ep.Buffer.get_low_latency_rdma_size_hint(tokens_of(s), SHAPES[s]["hidden"], world.size,
                                                              SHAPES[s]["experts"]) for s in shapes)
    buf = deep_ep.Buffer(None, 0, -(-need // (1 << 20)) * (1 << 20), low_latency_mode=True,
                         num_qps_per_rank=max(SHAPES[s]["experts"] // world.size for s in shapes),
                         explicitly_destroy=True, comm=world.comm)
    try:
        for shape in shapes:
            for dtype in DTYPES:
                try:
                    bad += _deepep_shape(ctx, buf, shape, dtype, out_path, iters)
                except Exception as exc:  # noqa: BLE001 - DeepEP refuses a shape (e.g. its hidden sizes)
                    bad += 1
                    _emit_rank0(ctx, out_path, {"impl": "deepep_ll", "variant": "v1.2.1", "shape": shape,
                                                "dtype": dtype, "ranks": world.size, "tokens": tokens_of(shape),
                                                "wrong": None, "error": f"{type(exc).__name__}: {exc}"[:300]})
    finally:
        torch.cuda.synchronize()
        buf.destroy()
    return bad


def _deepep_shape(ctx, buf, shape: str, dtype: str, out_path: str, iters: int) -> int:
    """One shape and dtype through DeepEP's low-latency kernels: times and the check (1 = wrong)."""
    from commbench.families.moe import reference as ref
    from commbench.families.moe.problem import make_problem

    world, dev, tokens = ctx.world, torch.device(ctx.device), tokens_of(shape)
    prm = params(shape, 0)
    p = make_problem(tokens * prm["hidden"] * 2, prm, world.rank, world.size, dtype)
    buf.clean_low_latency_buffer(tokens, p.hidden, p.experts)
    idx, w = p.routing.of_rank(p.rank)
    x = ref.make_tokens(p.rank, p.tokens, p.hidden, dev)
    topk_idx, topk_w = idx.to(dev).long(), w.to(dev).float()
    out = torch.empty(p.tokens, p.hidden, dtype=torch.bfloat16, device=dev)
    state = {}

    def dispatch():
        recv, _count, state["handle"], _, _ = buf.low_latency_dispatch(
            x, topk_idx, tokens, p.experts, use_fp8=p.fp8)
        state["recv"] = recv

    def identity_experts():   # the received rows (DeepEP's slot order varies per dispatch)
        recv = state["recv"]
        if p.fp8:
            rows = ref.dequantize_fp8(recv[0].view(-1, p.hidden), _scales_rows(recv[1], p))
            state["y"] = rows.to(torch.bfloat16).view(recv[0].shape)
        else:
            state["y"] = recv.clone()

    dispatch()
    identity_experts()

    def combine():
        buf.low_latency_combine(state["y"], topk_idx, topk_w, state["handle"], out=out)

    def pair():
        dispatch()
        combine()

    for _ in range(5):
        pair()
    rec = kernel_us(pair, iters)
    rec["dispatch_graph_us"] = graph_us(dispatch, iters)
    rec["combine_graph_us"] = graph_us(combine, iters)
    rec["dispatch_api_us"] = api_us(dispatch, iters)
    rec["combine_api_us"] = api_us(combine, iters)
    dispatch()
    identity_experts()
    combine()
    torch.cuda.synchronize()
    expected = x.float() * topk_w.sum(1, keepdim=True)
    diff = ref.calc_diff(out.float(), expected)
    wrong = p.tokens * p.hidden if diff >= p.diff_max else 0
    _emit_rank0(ctx, out_path, {"impl": "deepep_ll", "variant": "v1.2.1", "shape": shape,
                                "dtype": dtype, "ranks": p.ranks, "tokens": p.tokens, **rec,
                                "wrong": wrong, "calc_diff": diff})
    return int(wrong > 0)


def _scales_rows(scales: torch.Tensor, p) -> torch.Tensor:
    """DeepEP's FP8 scales [L, slots, H/128] (column-major inside) as plain rows."""
    return scales.contiguous().view(-1, p.num_scales)


def run_launches(ctx, shape: str, iters: int) -> int:
    """ipc_ll, BF16: ``iters`` dispatch + combine pairs and nothing else, to run under a profiler
    (ncu, nsys); the variants come from COMMBENCH_MOE_LL_DISPATCH and COMMBENCH_MOE_LL_COMBINE."""
    from commbench.families.moe import peer
    from commbench.families.moe.problem import make_problem

    prm = params(shape, torch.cuda.get_device_properties(ctx.device).multi_processor_count)
    p = make_problem(tokens_of(shape) * prm["hidden"] * 2, prm, ctx.world.rank, ctx.world.size, "bfloat16")
    st = peer.PeerState(p, "round_trip", "ll", ctx.world.comm, ctx.device, p.tokens)
    try:
        with torch.cuda.device(st.device), torch.cuda.stream(st.stream):
            for _ in range(iters):
                st.run()
        st.sync()
        return int(st.err.item())
    finally:
        st.close()


def main(kind: str, out_path: str, shapes: list[str], variants: list[str], iters: int,
         check_only: bool) -> int:
    os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", "6G")
    from commbench.measure.standalone import close_rank, open_rank

    ctx = open_rank()
    try:
        torch.cuda.set_device(torch.device(ctx.device))
        if kind == "launches":
            return run_launches(ctx, shapes[0], iters)
        if kind == "ours":
            return 1 if run_ours(ctx, shapes, variants, out_path, iters, check_only) else 0
        return 1 if run_deepep(ctx, shapes, out_path, iters) else 0
    finally:
        close_rank(ctx)
