"""The layer's all2all over real DeepEP (v1.2.1 `deep_ep.Buffer`): normal mode (`deepep`)
and low-latency mode (`deepep_ll`), when deep_ep is importable; and over UCCL-EP's
DeepEP-compatible Buffer (`uccl_ep`, `uccl_ep_ll`), which takes the same calls.

The buffer talks over the launch's mpi4py communicator (DeepEP accepts one in
place of a torch group), so it needs no NCCL group and runs with several ranks
on one GPU too. Normal mode hands back the received rows with local expert
ids (-1 = not here) and weights, and sums returned rows unweighted: the
experts weigh. Low-latency mode hands back [local experts, ranks * max tokens,
H] with a count per expert and weighs at the source: the experts do not.

The low-latency buffer initialises NVSHMEM inside DeepEP. NVSHMEM comes up
once per process, so the buffer is kept for the whole launch (cleaned for each
Case's shape) and cannot share a launch with our NVSHMEM backend: suites put
deepep_ll in a launch of its own (its own `env`). UCCL-EP needs a torch process group and keeps
one set of proxies per GPU: its Buffer lives for one layer Case and is destroyed when it closes.
"""
from __future__ import annotations

import torch

from ...errors import SkipCase
from . import reference as ref
from .expert_pack import RowsIn, RowsOut, SlotsIn, SlotsOut
from .problem import Problem

NVL_BUFFER_BYTES = 1 << 30
LL_CACHE_KEY = "moe.deepep_ll_buffer"
LL_MIN_RDMA_BYTES = 2 << 30   # room for the presets' decode shapes, so one buffer serves a launch


def import_deep_ep():
    try:
        import deep_ep
    except ImportError as exc:
        raise SkipCase(f"deep_ep is not importable: {exc}") from exc
    return deep_ep


class DeepEPNormalComm:
    """One micro-batch through DeepEP's normal (intranode) kernels."""

    def __init__(self, p: Problem, x: torch.Tensor, buffer, device):
        self.p, self.buffer = p, buffer
        dev = torch.device(device)
        idx, w = p.routing.of_rank(p.rank)
        self.topk_idx = idx.to(dev)
        self.topk_w = w.to(dev)
        self.x = ref.quantize_fp8(x) if p.fp8 else x
        layout = buffer.get_dispatch_layout(self.topk_idx, p.experts)
        self.per_rank, _, self.per_expert, self.in_rank, _ = layout
        self.layout = "rows"
        self.max_rows = int(p.routing.tokens_per_rank()[p.rank])
        self.y = torch.empty(max(self.max_rows, 1), p.hidden, dtype=torch.bfloat16, device=dev)
        self.sink = RowsOut(self.y.data_ptr(), p.hidden)
        self.source: RowsIn | None = None
        self.out = torch.zeros(p.tokens, p.hidden, dtype=torch.bfloat16, device=dev)

    def dispatch(self) -> None:
        p = self.p
        recv_x, recv_idx, recv_w, _, self.handle, _ = self.buffer.dispatch(
            self.x, topk_idx=self.topk_idx, topk_weights=self.topk_w,
            num_tokens_per_rank=self.per_rank, is_token_in_rank=self.in_rank,
            num_tokens_per_expert=self.per_expert)
        rows, scales = recv_x if p.fp8 else (recv_x, None)
        self._held = (rows, scales, recv_idx, recv_w)   # alive until the next dispatch
        self.n = rows.shape[0]
        self.source = RowsIn(rows.data_ptr(), p.row_bytes, scales.data_ptr() if p.fp8 else 0,
                             p.num_scales, recv_idx.data_ptr(), p.topk, True, 0,
                             recv_w.data_ptr(), p.topk, self.n)

    def combine(self) -> None:
        self.out, _, _ = self.buffer.combine(self.y[:self.n], self.handle)

    def failed(self) -> str:
        return ""

    def close(self) -> None:
        self._held = None


class DeepEPLowLatencyComm:
    """One micro-batch through DeepEP's low-latency kernels (max_tokens per rank fixed)."""

    def __init__(self, p: Problem, x: torch.Tensor, buffer, max_tokens: int, device):
        self.p, self.buffer, self.max_tokens = p, buffer, max_tokens
        dev = torch.device(device)
        idx, w = p.routing.of_rank(p.rank)
        self.topk_idx = idx.to(dev)
        self.topk_w = w.to(dev)
        self.x = x
        L, R, H = p.local_experts, p.ranks, p.hidden
        self.layout, self.max_rows, self.num_segs = "slots", 0, L
        self.y = torch.zeros(L, R * max_tokens, H, dtype=torch.bfloat16, device=dev)
        self.sink = SlotsOut(self.y.data_ptr(), H)
        self.out = torch.empty(p.tokens, H, dtype=torch.bfloat16, device=dev)
        self.source: SlotsIn | None = None

    def dispatch(self) -> None:
        p = self.p
        recv_x, recv_count, self.handle, _, _ = self.buffer.low_latency_dispatch(
            self.x, self.topk_idx, self.max_tokens, p.experts, use_fp8=p.fp8)
        rows, scales = recv_x if p.fp8 else (recv_x, None)
        self._held = (rows, scales, recv_count)
        s = scales.stride() if p.fp8 else (0, 0, 0)   # DeepEP keeps them column-major per expert
        self.source = SlotsIn(rows.data_ptr(), rows.stride(1) * rows.element_size(),
                              scales.data_ptr() if p.fp8 else 0, s[0], s[1], s[2],
                              recv_count.data_ptr(), p.local_experts, 1, rows.shape[1])

    def combine(self) -> None:
        self.buffer.low_latency_combine(self.y, self.topk_idx, self.topk_w, self.handle,
                                        out=self.out)

    def failed(self) -> str:
        return ""

    def close(self) -> None:
        self._held = None


def normal_buffer(comm, num_sms: int):
    """A normal-mode buffer for one Case (IPC only, cheap to make) with our SM budget."""
    deep_ep = import_deep_ep()
    deep_ep.Buffer.set_num_sms(max(2, num_sms - num_sms % 2))   # DeepEP wants an even count
    return deep_ep.Buffer(None, NVL_BUFFER_BYTES, 0, comm=comm)


def low_latency_buffer(ctx, p: Problem, max_tokens: int):
    """The launch's low-latency buffer, made on first use and cleaned for this shape."""
    deep_ep = import_deep_ep()
    if "nvshmem" in ctx.cache:
        raise SkipCase("this launch already brought NVSHMEM up for our kernels; DeepEP's "
                       "low-latency mode needs its own: give deepep_ll a launch of its own "
                       "(a different env, e.g. COMMBENCH_GROUP)")
    need = deep_ep.Buffer.get_low_latency_rdma_size_hint(max_tokens, p.hidden, p.ranks, p.experts)
    cached = ctx.cache.get(LL_CACHE_KEY)
    if cached is None:
        size = max(need, LL_MIN_RDMA_BYTES)
        size = -(-size // (1 << 20)) * (1 << 20)
        buffer = deep_ep.Buffer(None, 0, size, low_latency_mode=True,
                                num_qps_per_rank=max(1, p.local_experts), explicitly_destroy=True,
                                comm=ctx.world.comm)
        ctx.cache[LL_CACHE_KEY] = cached = (buffer, size)
        ctx.on_close(buffer.destroy)
    buffer, size = cached
    if need > size:
        raise SkipCase(f"DeepEP's low-latency buffer of this launch holds {size} bytes, this "
                       f"shape needs {need}: run it in a launch of its own")
    buffer.clean_low_latency_buffer(max_tokens, p.hidden, p.experts)
    return buffer


def uccl_layer_buffer(group, p: Problem, max_tokens: int, low_latency: bool, num_sms: int):
    """UCCL-EP's Buffer for one layer Case (both micro-batches), normal or low-latency mode."""
    from .deepep import import_library, uccl_buffer

    lib = import_library("uccl_ep")
    if not low_latency:
        lib.Buffer.set_num_sms(max(2, num_sms - num_sms % 2))   # even, as DeepEP's
        return uccl_buffer(lib, group, NVL_BUFFER_BYTES, 0)
    size = lib.Buffer.get_low_latency_rdma_size_hint(max_tokens, p.hidden, p.ranks, p.experts)
    buffer = uccl_buffer(lib, group, 0, size, low_latency_mode=True, num_qps_per_rank=max(1, p.local_experts))
    try:
        buffer.clean_low_latency_buffer(max_tokens, p.hidden, p.experts)
    except BaseException:
        buffer.destroy()   # not yet the Case's: nothing else would destroy it
        raise
    return buffer
