"""MoE expert-parallel dispatch/combine: our kernels (normal and low-latency
layouts over CUDA IPC, low-latency over NVSHMEM) against NCCL baselines, torch
symmetric memory and DeepEP.

``size_bytes`` is the per-rank BF16 input (tokens * hidden * 2), whatever the
dispatch dtype; routing, shape and SM count are parameters (all columns).
algbw uses DeepEP's byte accounting; busbw uses the bytes that really cross
links (see commbench/families/moe/bytes.py and docs/families/moe.md).

The `layer` op is the whole MoE layer (dispatch -> SwiGLU experts -> combine,
commbench/families/moe/layer.py); model presets and phases set its shape and tokens.
"""
from __future__ import annotations

from ...comm.agree import all_true
from ...comm.context import RankContext
from ...errors import SkipCase
from ...measure.api_kernel import MAX_API_CALLS
from ...measure.device import nccl_identity_clash
from ..base import Case, Family, Param, Traffic, multiple_of
from . import layer_plan
from .layer_plan import GEMMS, OVERLAPS
from .presets import MODEL_CHOICES, PHASES

IPC_BACKENDS = ("ipc", "ipc_ll")
OUR_BACKENDS = IPC_BACKENDS + ("nvshmem_ll",)
LL_BACKENDS = ("ipc_ll", "nvshmem_ll")
DEEPEP_API_BACKENDS = ("deepep", "uccl_ep")   # deep_ep.Buffer's API: DeepEP, UCCL-EP's wrapper
# the layer's backends that talk over the launch's torch process group
LAYER_GROUP_BACKENDS = ("nccl_a2a", "nccl_agrs", "symm_a2av", "uccl_ep", "uccl_ep_ll")
LL_SMEM_TOKENS = 12288   # ll_dispatch keeps one int per token in 48 KiB of shared memory
# Bounds past every published MoE model (DeepSeek-V3: hidden 7168, 256 experts; Mixtral: FFN 14336)
# that keep one rank's buffers and the CPU routing (tokens x ranks x experts scores) in memory.
MAX_HIDDEN = 65536
MAX_EXPERTS = 1024
MAX_LAYER_TOKENS = 32768   # 8x DeepEP's prefill batch of 4096 tokens per rank
MAX_INTERMEDIATE = 32768
SEED_MAX = 2**32 - 1


class MoeFamily(Family):
    name = "moe"
    summary = ("MoE dispatch/combine and the whole MoE layer: DeepEP-style kernels vs NCCL, "
               "symmetric-memory, DeepEP and UCCL-EP baselines")
    # round_trip: dispatch then combine, timed as one; layer: dispatch, experts, combine
    ops = ("dispatch", "combine", "round_trip", "layer")
    backends = ("ipc", "ipc_ll", "nvshmem_ll", "nccl_a2a", "nccl_agrs", "symm_a2av", "deepep",
                "deepep_ll", "uccl_ep", "uccl_ep_ll")
    dtypes = ("bfloat16", "float8_e4m3")
    default_dtype = "bfloat16"
    params = {
        "hidden": Param(7168, (int,), "channels per token", range=(8, MAX_HIDDEN), check=multiple_of(8)),
        "topk": Param(8, (int,), "experts chosen per token (one lane of a warp per choice)", range=(1, 32)),
        "experts": Param(256, (int,), "experts in total (a multiple of the ranks)", range=(1, MAX_EXPERTS)),
        "routing": Param("random", (str,), "random (DeepEP), group (DeepSeek-V3 group-limited), "
                         "zipf (skewed hot experts)", ("random", "group", "zipf")),
        "seed": Param(0, (int,), "routing seed (the same on every rank)", range=(0, SEED_MAX)),
        "n_group": Param(8, (int,), "group routing: expert groups", range=(1, MAX_EXPERTS)),
        "topk_group": Param(4, (int,), "group routing: groups a token may use", range=(1, MAX_EXPERTS)),
        # 10: the least popular of 1024 experts still has a float64 weight (1024^-10 ~ 1e-30)
        "zipf_s": Param(1.2, (float, int), "zipf routing: popularity exponent (0: uniform)", range=(0, 10)),
        # every block must be resident (they wait across ranks): setup skips more than the GPU has
        "num_sms": Param(24, (int,), "CTAs our kernels launch (one per SM)", range=(1, 1024)),
        "timed_loop": Param("native", (str,), "ipc, ipc_ll, nvshmem_ll: enqueue the timed batch of our "
                            "kernels from native code (Python entered once per batch) or from Python, "
                            "one ctypes call per op", choices=("native", "python")),
        "api_calls": Param(10, (int,), "dispatch, combine, round_trip: calls made one at a time after "
                           "the timed batch; api_us (host clock, the device waited for) and "
                           "kernel_only_us (the profiler's device time) are their medians (0: neither)",
                           range=(0, MAX_API_CALLS)),
        "max_tokens": Param(0, (int,), "low-latency token budget per rank (0 = the tokens)",
                            range=(0, LL_SMEM_TOKENS)),
        "model": Param("custom", (str,), "shape preset (hidden, experts, topk, intermediate, "
                       "routing); keys the suite writes win", MODEL_CHOICES),
        "phase": Param("prefill", (str,), "layer: prefill (4096 tokens per rank) or decode (128)",
                       PHASES),
        "tokens": Param(0, (int,), "layer: tokens per rank (0 = the phase's)", range=(0, MAX_LAYER_TOKENS)),
        "intermediate": Param(2048, (int,), "layer: expert FFN width (moe_intermediate; 16-byte GEMM "
                              "rows: a multiple of 8)", range=(8, MAX_INTERMEDIATE), check=multiple_of(8)),
        "overlap": Param("none", (str,), "layer: none, or two_batch (two micro-batches, one's "
                         "dispatch overlaps the other's experts)", OVERLAPS),
        "gemm": Param("auto", (str,), "layer: grouped_mm (torch._grouped_mm), loop (a GEMM per "
                      "expert), fused (our Triton MoE kernel) or auto (grouped_mm where it works)",
                      GEMMS),
    }

    def _params(self, case: Case) -> dict:
        return {k: case.param(k, p.default) for k, p in self.params.items()}

    def finalize_case(self, case: Case, explicit: frozenset) -> Case:
        return layer_plan.finalize(case, explicit)

    def validate_bench(self, bench: dict) -> list[tuple[str, str]]:
        return layer_plan.validate(bench)

    def impossible(self, case: Case) -> tuple[str, str] | None:
        from .shape import shape_problem, tokens_for

        prm = self._params(case)
        conflict = shape_problem(case.size_bytes, prm["hidden"], case.dtype)
        if conflict:
            return conflict
        if case.op == "combine" and case.dtype != "bfloat16":
            return ("dtypes", "combine is BF16 only (FP8 applies to dispatch)")
        if case.backend == "deepep_ll" and case.op != "layer":
            return ("backends", "deepep_ll runs in the layer op (its dispatch and combine alone are the "
                    "layer row's dispatch_us and combine_us)")
        if case.backend == "uccl_ep_ll" and case.op != "layer":
            return ("backends", "uccl_ep_ll (UCCL-EP's low-latency mode) runs in the layer op")
        if prm["topk"] > prm["experts"]:
            return ("params.topk", f"topk ({prm['topk']}) exceeds the experts ({prm['experts']})")
        if prm["experts"] % case.ranks:
            return ("params.experts", f"experts ({prm['experts']}) must be a multiple of the ranks ({case.ranks})")
        if prm["routing"] == "group":
            conflict = _group_routing_problem(prm)
            if conflict:
                return conflict
        if case.backend in LL_BACKENDS and tokens_for(case.size_bytes, prm["hidden"]) > LL_SMEM_TOKENS:
            # the layer's tokens come from params.tokens (or the phase), the other ops' from sizes
            return ("params.tokens" if case.op == "layer" else "sizes",
                    f"low-latency mode takes at most {LL_SMEM_TOKENS} tokens per rank")
        if case.backend == "symm_a2av" and case.ranks < 2:
            return ("ranks", "torch's symmetric-memory all-to-all (its NVSHMEM backend) needs 2 or more ranks")
        if case.op == "layer":
            return layer_plan.impossible(case, prm)
        return layer_plan.deepep_refusal(case, prm)   # DeepEP's own hidden sizes and rank counts

    def setup(self, case: Case, ctx: RankContext):
        import torch

        from .problem import make_problem

        if not torch.cuda.is_available() or not ctx.device.startswith("cuda"):
            raise SkipCase("the moe family needs a CUDA GPU")
        prm = self._params(case)
        sms = torch.cuda.get_device_properties(ctx.device).multi_processor_count
        if case.backend in OUR_BACKENDS and prm["num_sms"] > sms:
            # our kernels wait across ranks inside blocks: every block must be resident
            raise SkipCase(f"num_sms ({prm['num_sms']}) exceeds this GPU's {sms} SMs")
        world = ctx.world
        if case.op == "layer":   # it times its own phases (measure): no api_us / kernel_only_us
            return _layer_state(case, ctx, prm)
        problem = make_problem(case.size_bytes, prm, world.rank, world.size, case.dtype)
        if case.backend in OUR_BACKENDS:
            state = _our_state(case, ctx, problem, prm)
        else:
            group = _nccl_group(ctx, case.backend)
            if case.backend in DEEPEP_API_BACKENDS:
                from .deepep import DeepEPState

                state = DeepEPState(problem, case.op, group, ctx.device, case.backend)
            else:
                from .baselines import BaselineState

                state = BaselineState(problem, case.op, case.backend, group, ctx.device)
        state.count = problem.tokens
        state.api_calls = prm["api_calls"]
        state.extra.update(_columns(case, problem.routing, prm["hidden"]))
        tokens = state.extra.get("tokens_per_rank")
        if tokens:
            state.columns_from_time = lambda time_us: {"tokens_per_s": float(tokens) / (time_us * 1e-6)}
        return state

    def run(self, state) -> None:
        state.run()

    def check(self, state) -> int:
        from .peer import PeerState

        if isinstance(state, PeerState):
            from .peer_check import check

            return check(state)
        return state.check()

    def traffic(self, case: Case, world_size: int) -> Traffic:
        from . import routing
        from .bytes import moe_bytes
        from .shape import tokens_for

        prm = self._params(case)
        routed = routing.for_case(prm, tokens_for(case.size_bytes, prm["hidden"]), world_size)
        b = moe_bytes(routed, _bytes_op(case.op), case.backend, case.dtype, prm["hidden"])
        return Traffic(b.deepep_bytes, b.link_bytes / b.deepep_bytes if b.deepep_bytes else 0.0)

    def memory_bytes(self, case: Case, world_size: int):
        """The layer's device memory per rank (memory.py); the dispatch/combine ops carry none."""
        if case.op != "layer":
            return None
        from .memory import layer_plan

        return layer_plan(case, self._params(case), world_size)

    def teardown(self, state) -> None:
        state.close()


def _columns(case: Case, routing, hidden: int) -> dict:
    """Extra result columns: mode, tokens, load imbalance, both byte counts, the LL variant."""
    from .bytes import LOW_LATENCY_BACKENDS, moe_bytes

    b = moe_bytes(routing, _bytes_op(case.op), case.backend, case.dtype, hidden)
    cols = {"mode": "low_latency" if case.backend in LOW_LATENCY_BACKENDS else "normal",
            "tokens_per_rank": routing.num_tokens, "deepep_bytes": b.deepep_bytes,
            "link_bytes": b.link_bytes, "rows_per_rank": b.rows, **routing.imbalance()}
    if case.backend in LL_BACKENDS:   # which kernel organisation ran (PeerState reads the same)
        from .peer import ll_variant_label

        cols["ll_variant"] = ll_variant_label()
    return cols


def _bytes_op(op: str) -> str:
    """The layer moves what a round trip moves (the experts move nothing)."""
    return "round_trip" if op == "layer" else op


def _layer_state(case: Case, ctx: RankContext, prm: dict):
    from .layer import LayerState

    group = _nccl_group(ctx, case.backend) if case.backend in LAYER_GROUP_BACKENDS else None
    state = LayerState(case, ctx, prm, group)
    state.extra.update(_columns(case, state.problem.routing, prm["hidden"]))
    return state


def _our_state(case: Case, ctx: RankContext, problem, prm: dict):
    """PeerState for ipc / ipc_ll (CUDA IPC) or nvshmem_ll (NVSHMEM, which the launch brings up)."""
    from .peer import PeerState

    mode = "normal" if case.backend == "ipc" else "ll"
    if case.backend != "nvshmem_ll":
        state = PeerState(problem, case.op, mode, ctx.world.comm, ctx.device, prm["max_tokens"])
        if prm["timed_loop"] == "native":
            state.native = state.native_op()
        return state
    import os

    from ...comm import nvshmem as boot

    handle = boot.ensure(ctx)   # SkipCase with NVSHMEM's reason when it cannot come up
    state = PeerState(problem, case.op, mode, ctx.world.comm, ctx.device, prm["max_tokens"],
                      transport="nvshmem", handle=handle)
    all_p2p = all_true(ctx.world, state.ws.all_p2p)
    state.extra.update(transport=boot.transport_label(dict(os.environ), all_p2p),
                       nvshmem_version=boot.metadata()["nvshmem"], nvshmem_mode=handle.status_name)
    if prm["timed_loop"] == "native":
        state.native = state.native_op()
    return state


SYMM_SHARED_GPU = ("torch symmetric memory's all_to_all_vdev runs NVSHMEM team collectives, which NVSHMEM "
                   "refuses when processes share a GPU without MPS (limited MPG: the process exits); "
                   "symm_a2av needs one GPU per rank")


def _nccl_group(ctx: RankContext, backend: str):
    """The launch's torch process group (ranks sharing a GPU have their own NCCL_HOSTID each)."""
    if backend == "symm_a2av" and (ctx.ranks_per_gpu or 1) > 1:
        raise SkipCase(SYMM_SHARED_GPU)
    clash = nccl_identity_clash(ctx.world, ctx.device)
    if clash:
        raise SkipCase(clash)
    from ...comm.process_group import process_group

    return process_group(ctx)


FAMILY = MoeFamily()


def _group_routing_problem(prm: dict) -> tuple[str, str] | None:
    """What group-limited routing cannot do with these parameters (routing.group_limited):
    (the parameter to blame, reason)."""
    if prm["experts"] % prm["n_group"]:
        return ("params.n_group", f"group routing: experts ({prm['experts']}) must be a multiple of "
                                  f"n_group ({prm['n_group']})")
    if prm["topk_group"] > prm["n_group"]:
        return ("params.topk_group", f"group routing: topk_group ({prm['topk_group']}) exceeds "
                                     f"n_group ({prm['n_group']})")
    if prm["topk"] > prm["topk_group"] * (prm["experts"] // prm["n_group"]):
        return ("params.topk", f"group routing: topk ({prm['topk']}) exceeds the "
                               f"{prm['topk_group'] * (prm['experts'] // prm['n_group'])} experts in "
                               f"topk_group ({prm['topk_group']}) groups")
    return None
