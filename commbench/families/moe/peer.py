"""Our dispatch/combine kernels over peer pointers: backends ipc and ipc_ll
(CUDA IPC) and nvshmem_ll (NVSHMEM symmetric memory, puts + signals).

``PeerState`` owns the workspace, the inputs and the kernel arguments; it
enqueues one dispatch or combine per ``run`` on the current stream (so the
runner's CUDA-graph capture records it). Epochs are counted on the device,
one counter per op; every rank must still run the op equally often (the
runner does).
"""
from __future__ import annotations

import ctypes
import os

import torch

from ... import jit
from ...comm.agree import agree
from ...comm.ipc import PeerWorkspace, check_cuda
from ...measure.state import CaseState
from . import reference as ref
from .problem import Problem
from .workspace import offsets_array, workspace_layout


def _vp(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


TRANSPORTS = ("ipc", "nvshmem")
EPOCH_COUNTER_INTS = 3   # moe::EpochCounter: value, blocks_done, arrived
# Organisations of the low-latency kernels (moe::DispatchVariant, moe::CombineVariant in
# kernels/moe_ll_kernels.cuh and moe_ll_combine.cuh), chosen with these variables for A/B
# measurements; the first of each is the default.
DISPATCH_VARIANTS = {"flat": 2, "plain": 1, "staged": 0}
COMBINE_VARIANTS = {"rows": 0, "per_expert": 1, "rows_fenced": 2}
DISPATCH_VARIANT_VAR = "COMMBENCH_MOE_LL_DISPATCH"
COMBINE_VARIANT_VAR = "COMMBENCH_MOE_LL_COMBINE"
# The default combine's two halves alone, and the flat dispatch's rows without their release
# (timing breakdowns only: the output is incomplete), never taken from the environment.
COMBINE_PARTS = {"send_only": 3, "reduce_only": 4}
DISPATCH_PARTS = {"flat_send_only": 3}


def _variant(var: str, choices: dict[str, int]) -> str:
    name = os.environ.get(var, "") or next(iter(choices))
    if name not in choices:
        raise ValueError(f"{var}={name!r}: expected one of {sorted(choices)}")
    return name


def dispatch_variant() -> str:
    """The low-latency dispatch variant this process uses (ValueError for an unknown name)."""
    return _variant(DISPATCH_VARIANT_VAR, DISPATCH_VARIANTS)


def combine_variant() -> str:
    """The low-latency combine organisation this process uses (ValueError for an unknown name)."""
    return _variant(COMBINE_VARIANT_VAR, COMBINE_VARIANTS)


def ll_variant_label(dispatch: str | None = None, combine: str | None = None) -> str:
    """The ``ll_variant`` result column: "dispatch=X,combine=Y" (by default this process's)."""
    return f"dispatch={dispatch or dispatch_variant()},combine={combine or combine_variant()}"


def workspace_sizes(p: Problem, mode: str, max_tokens: int, staged: bool = False) -> dict[str, int]:
    """Bytes of each workspace field for one mode; ``staged`` adds the input (NVSHMEM)."""
    R, L, K, H = p.ranks, p.local_experts, p.topk, p.hidden
    if mode == "normal":
        rows = R * p.tokens     # worst case: every token of every rank comes here
        return {"cnt_in": 8 * R, "done_in": 4 * R, "ready_in": 4 * R, "expert_cnt_in": 4 * R * L,
                "recv_src": 8 * rows, "recv_topk_idx": 4 * rows * K, "recv_topk_w": 4 * rows * K,
                "recv_x": rows * p.row_bytes, "recv_scales": 4 * rows * p.num_scales,
                "y": 2 * rows * H}
    slots = L * R * max_tokens
    sizes = {"ll_cnt_in": 8 * L * R, "ll_recv_count": 4 * L * R, "ll_recv_src": 4 * slots,
             "ll_recv_x": slots * p.row_bytes, "ll_recv_scales": 4 * slots * p.num_scales,
             "ll_y": 2 * slots * H, "ll_comb_buf": 2 * max_tokens * K * H,
             "ll_comb_cnt": 8 * p.experts, "ll_comb_flag": 8 * max_tokens * K}
    if staged:
        sizes.update(ll_send_x=p.tokens * p.row_bytes, ll_send_scales=4 * p.tokens * p.num_scales)
    return sizes


class PeerState(CaseState):
    """State of one ipc / ipc_ll / nvshmem_ll Case on this rank (the runner reads stream and extra).

    ``transport`` is "ipc" or "nvshmem" (low-latency mode only; ``handle`` is
    the launch's NVSHMEM handle, ``buffer_name`` names its symmetric buffer).
    """

    def __init__(self, p: Problem, op: str, mode: str, comm, device: str, max_tokens: int = 0,
                 transport: str = "ipc", handle=None, buffer_name: str | None = None):
        super().__init__()  # CaseState defaults; fields set below
        if transport not in TRANSPORTS or (transport == "nvshmem" and mode != "ll"):
            raise ValueError(f"no {mode} kernels over {transport}")
        self.p, self.op, self.mode, self.comm, self.transport = p, op, mode, comm, transport
        self.device = torch.device(device)
        self.stream = torch.cuda.current_stream(self.device)
        self.max_tokens = max(max_tokens, p.tokens)
        self.extra: dict = {}
        staged = transport == "nvshmem"
        self.offsets, nbytes = workspace_layout(workspace_sizes(p, mode, self.max_tokens, staged))
        # Each step that can fail on one rank alone is agreed on before the next
        # collective, so a failure is an error on every rank, never a hang.
        if staged:
            from .shmem import ATTACH_SYMBOL, KERNELS, SymmetricWorkspace

            self.lib = agree(comm, lambda: handle.load(KERNELS, ATTACH_SYMBOL), "loading the kernels")
            # states alive at once (the layer's micro-batches) need buffers of their own
            self.ws = SymmetricWorkspace(handle, nbytes, comm, p.rank, p.ranks,
                                         **({"name": buffer_name} if buffer_name else {}))
        else:
            self.lib = agree(comm, lambda: jit.load("moe_normal" if mode == "normal" else "moe_ll"),
                             "loading the kernels")
            self.ws = PeerWorkspace(nbytes, comm, p.rank)
        try:
            agree(comm, self._prepare, "preparing the inputs")
        except Exception:
            self.ws.close()    # every rank is here: its barrier is matched
            raise
        if op in ("combine", "round_trip"):
            # The expert outputs combine reads: one dispatch, identity experts.
            self.dispatch()
            self.fill_y()
            self.sync()

    # --- set-up -------------------------------------------------------------
    def _inputs(self) -> None:
        p, dev = self.p, self.device
        idx, w = p.routing.of_rank(p.rank)
        self.x = ref.make_tokens(p.rank, p.tokens, p.hidden, dev)
        if p.fp8:
            fp8, self.scales = ref.quantize_fp8(self.x)
            self.x_send = fp8.view(torch.uint8)
        else:
            self.x_send, self.scales = self.x, torch.zeros(1, device=dev)
        self.topk_idx = idx.int().to(dev)
        self.topk_w = w.to(dev)
        self.peers = torch.tensor(self.ws.peers, dtype=torch.int64, device=dev)
        self.err = torch.zeros(1, dtype=torch.int32, device=dev)
        # moe::EpochCounter for dispatch, then for combine
        self.epochs = torch.zeros(2 * EPOCH_COUNTER_INTS, dtype=torch.int32, device=dev)
        self.out = torch.empty(p.tokens, p.hidden, dtype=torch.bfloat16, device=dev)
        if self.mode == "normal":
            lay = ref.send_layout(p.routing, p.rank)
            self.send_pos = lay.send_pos.contiguous().to(dev)
            self.send_count = lay.send_count.to(dev)
            self.expert_count = lay.expert_count.to(dev)
            self.rank_w = lay.rank_weight.contiguous().to(dev)
            self.base_off = torch.zeros(p.ranks, dtype=torch.int32, device=dev)

    def _prepare(self) -> None:
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            self._inputs()
            if self.transport == "nvshmem":
                self._stage_inputs()
        self._args()

    def _stage_inputs(self) -> None:
        """NVSHMEM puts read from symmetric memory: copy the input (and scales) there."""
        base = self.ws.peers[self.p.rank]
        self.write("ll_send_x", self.x_send)
        self.x_src = base + self.offsets["ll_send_x"]
        self.scales_src = base + self.offsets["ll_send_scales"]
        if self.p.fp8:
            self.write("ll_send_scales", self.scales)
        self.stream.synchronize()

    def _args(self) -> None:
        p = self.p
        self.dims = (ctypes.c_int * 10)(p.rank, p.ranks, p.tokens, p.hidden, p.topk, p.experts,
                                        p.local_experts, p.row_bytes, p.num_scales,
                                        self.max_tokens)
        self.offs = offsets_array(self.offsets)
        if self.transport == "nvshmem":
            self.common = (ctypes.c_void_p(self.ws.peers[p.rank]), self.dims, self.offs)
            self.ll_x = (ctypes.c_void_p(self.x_src), ctypes.c_void_p(self.scales_src))
            self.ll_dispatch, self.ll_combine = (self.lib.moe_shmem_ll_dispatch,
                                                 self.lib.moe_shmem_ll_combine)
        else:
            self.common = (_vp(self.peers), self.dims, self.offs)
            self.ll_x = (_vp(self.x_send), _vp(self.scales))
            if self.mode == "ll":
                self.ll_dispatch, self.ll_combine = self.lib.moe_ll_dispatch, self.lib.moe_ll_combine
        self.sms = ctypes.c_int(p.num_sms)
        self.variant = ctypes.c_int(COMBINE_VARIANTS[combine_variant()])
        self.dispatch_variant = ctypes.c_int(DISPATCH_VARIANTS[dispatch_variant()])
        base = self.epochs.data_ptr()
        self.dispatch_epochs = ctypes.c_void_p(base)
        self.combine_epochs = ctypes.c_void_p(base + 4 * EPOCH_COUNTER_INTS)

    def _stream_handle(self) -> ctypes.c_void_p:
        """The current stream: ours when timing with events, the capture stream in a graph."""
        return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)

    # --- the ops --------------------------------------------------------------
    def run(self) -> None:
        if self.op != "combine":
            self.dispatch()
        if self.op != "dispatch":
            self.combine()   # round_trip: over the expert outputs made at set-up

    def _dispatch_call(self) -> tuple:
        """(launcher, arguments before the stream) of one dispatch."""
        if self.mode == "normal":
            return self.lib.moe_normal_dispatch, (
                *self.common, _vp(self.send_pos), _vp(self.send_count), _vp(self.expert_count),
                _vp(self.topk_idx), _vp(self.topk_w), _vp(self.x_send), _vp(self.scales),
                _vp(self.base_off), self.dispatch_epochs, self.sms, _vp(self.err))
        return self.ll_dispatch, (*self.common, _vp(self.topk_idx), *self.ll_x, self.dispatch_epochs,
                                  self.sms, self.dispatch_variant, _vp(self.err))

    def _combine_call(self) -> tuple:
        """(launcher, arguments before the stream) of one combine."""
        if self.mode == "normal":
            return self.lib.moe_normal_combine, (*self.common, _vp(self.send_pos), _vp(self.base_off),
                                                 _vp(self.rank_w), _vp(self.out), self.combine_epochs,
                                                 self.sms, _vp(self.err))
        return self.ll_combine, (*self.common, _vp(self.topk_idx), _vp(self.topk_w), _vp(self.out),
                                 self.combine_epochs, self.sms, self.variant, _vp(self.err))

    def dispatch(self) -> None:
        fn, args = self._dispatch_call()
        check_cuda(fn(*args, self._stream_handle()), f"{self.mode} dispatch launch")

    def combine(self) -> None:
        fn, args = self._combine_call()
        check_cuda(fn(*args, self._stream_handle()), f"{self.mode} combine launch")

    def native_op(self):
        """The op (dispatch, combine, or both for round_trip) as the same launcher calls made from
        native code, for the runner's native timed loop (measure.native_loop.launcher_op)."""
        from ...measure.native_loop import launcher_op

        calls = []
        if self.op != "combine":
            calls.append(self._dispatch_call())
        if self.op != "dispatch":
            calls.append(self._combine_call())
        return launcher_op(calls)

    # --- workspace access (on this state's stream) ------------------------------
    def sync(self) -> None:
        """Finish our stream, then wait for every rank (so peers' writes have landed)."""
        self.stream.synchronize()
        self.comm.Barrier()

    def read(self, field: str, shape, dtype: torch.dtype, offset_elems: int = 0) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=self.device)
        nbytes = out.numel() * out.element_size()
        src = self.ws.peers[self.p.rank] + self.offsets[field] + offset_elems * out.element_size()
        self.ws.copy(out.data_ptr(), src, nbytes, self.stream.cuda_stream)
        return out

    def write(self, field: str, tensor: torch.Tensor) -> None:
        dst = self.ws.peers[self.p.rank] + self.offsets[field]
        self.ws.copy(dst, tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                     self.stream.cuda_stream)

    def fill_y(self) -> None:
        """Expert outputs = the received rows (identity experts), BF16; FP8 is dequantised."""
        p = self.p
        rows = p.ranks * p.tokens if self.mode == "normal" else (
            p.local_experts * p.ranks * self.max_tokens)
        x_field, s_field, y_field = (("recv_x", "recv_scales", "y") if self.mode == "normal"
                                     else ("ll_recv_x", "ll_recv_scales", "ll_y"))
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if not p.fp8:
                y = self.read(x_field, (rows, p.hidden), torch.bfloat16)
            else:
                fp8 = self.read(x_field, (rows, p.hidden), torch.uint8).view(torch.float8_e4m3fn)
                scales = self.read(s_field, (rows, p.num_scales), torch.float32)
                y = ref.dequantize_fp8(fp8, scales).to(torch.bfloat16)
            self.write(y_field, y)
            self.stream.synchronize()

    def close(self) -> None:
        self.stream.synchronize()
        self.ws.close()
