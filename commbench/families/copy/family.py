"""The copy family (docs/families/copy.md): nvbandwidth's questions. How fast does one copy go
host-to-device, device-to-host, within a GPU, and between every ordered pair of GPUs, one way and
both ways at once, by the copy engines (cudaMemcpyAsync) and by an SM kernel (kernels/copy.cu)?

One process drives every GPU (``ranks: 1``); ``gpu`` names the GPU a copy runs on (the source of
a p2p copy) and ``peer`` the other GPU of a pair. Each row's busbw is the bytes copied per second
(both directions together for bidir); its bound is PCIe, HBM / 2 or NVLink (analysis/bounds.py).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...comm.context import RankContext
from ...errors import SkipCase
from ...measure.state import CaseState
from ..base import Case, Family, Param, Traffic
from . import buffers
from .buffers import Direction, Pool

HOST_OPS = ("h2d", "d2h")
PAIR_OPS = ("p2p", "bidir")
MAX_GPUS = 64
# Several times the L2 of current GPUs (H100/H200 50 MB, B200 126 MB): a rotated source and
# destination never fit in it, so a small copy within a GPU cannot beat HBM from L2
ROTATION_SPAN_BYTES = 256 << 20


@dataclass
class CopyState(CaseState):
    op: object                       # native.CopyOp, the struct the native loop enqueues
    directions: list[Direction]
    pools: list[Pool]
    devices: tuple[int, ...]         # the GPUs the copy touches (synchronised around the check)
    prev_device: int = 0             # the current device before set-up (restored by teardown)
    bidir: bool = False


def _places(op: str, memory: str) -> tuple[str, str]:
    """(source, destination) of direction A: "device" or the host memory kind."""
    return {"h2d": (memory, "device"), "d2h": ("device", memory)}.get(op, ("device", "device"))


def _bus_id(index: int) -> str:
    """The GPU's PCI address as NVML writes it (00000000:1B:00.0), "" when torch does not say."""
    import torch

    props = torch.cuda.get_device_properties(index)
    bus, dev, dom = (getattr(props, k, None) for k in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    return "" if bus is None or dev is None else f"{dom or 0:08X}:{bus:02X}:{dev:02X}.0"


class Copy(Family):
    name = "copy"
    summary = "host<->device, within a GPU and GPU pairs (one way, both ways) by copy engine and SM kernel"
    ops = ("h2d", "d2h", "d2d", "p2p", "bidir")
    backends = ("cuda",)
    dtypes = ("int32",)
    default_dtype = "int32"
    needs_gpu = True
    params = {
        "engine": Param("ce", (str,), "who copies: ce = a copy engine (cudaMemcpyAsync), sm = commbench's "
                        "SM kernel (16-byte vectors in contiguous tiles per CTA; host memory through a device mapping)",
                        choices=("ce", "sm")),
        "memory": Param("pinned", (str,), "h2d and d2h: the host buffer is pinned (cudaHostAlloc, mapped) "
                        "or pageable (malloc; the driver stages it, copy engine only)",
                        choices=("pinned", "pageable")),
        "gpu": Param(0, (int,), "the GPU the copy runs on (for p2p and bidir: the source of direction A); "
                     "a GPU this machine lacks gives a skipped row", range=(0, MAX_GPUS - 1)),
        "peer": Param(-1, (int,), "p2p and bidir: the other GPU of the pair (-1: none, the other ops)",
                      range=(-1, MAX_GPUS - 1)),
        "buffer_span_bytes": Param(ROTATION_SPAN_BYTES, (int,), "consecutive copies use buffers at offsets "
                                   "rotating through this many bytes, so no copy reads the previous one's "
                                   "data from L2; 0 reuses one buffer (cache-hot)", range=(0, 1 << 40)),
        "sm_ctas": Param(0, (int,), "engine sm: CTAs of 512 threads (0: 4 per SM, a full load)",
                         range=(0, 1 << 16)),
    }

    def impossible(self, case: Case) -> tuple[str, str] | None:
        if case.ranks != 1:
            return ("ranks", "the copy family drives every GPU from one process: ranks: 1")
        if case.size_bytes < buffers.ELEMENT_BYTES or case.size_bytes % buffers.ELEMENT_BYTES:
            return ("sizes", f"a copy moves whole {buffers.ELEMENT_BYTES}-byte words (the check's int32 "
                             f"pattern), got {case.size_bytes} B")
        if case.param("memory", "pinned") == "pageable":
            if case.op not in HOST_OPS:
                return ("params.memory", f"{case.op} moves no host memory: memory applies to h2d and d2h")
            if case.param("engine", "ce") == "sm":
                return ("params.memory", "an SM kernel reaches host memory through a device mapping, which "
                                         "pageable memory lacks: pageable copies are engine ce")
            if case.timing == "graph":
                return ("timing", "a copy from or to pageable memory cannot be captured in a CUDA graph")
        gpu, peer = case.param("gpu", 0), case.param("peer", -1)
        if case.op in PAIR_OPS:
            if peer < 0:
                return ("params.peer", f"{case.op} copies between two GPUs: params.peer names the second")
            if peer == gpu:
                return ("params.peer", "a GPU is not its own peer (a copy within one GPU is op d2d)")
        elif peer >= 0:
            return ("params.peer", f"{case.op} involves one GPU: params.peer applies to p2p and bidir")
        return None

    def setup(self, case: Case, ctx: RankContext) -> CopyState:
        import torch

        if not torch.cuda.is_available():
            raise SkipCase("the copy family needs a GPU; none is visible to this process")
        gpu, peer = case.param("gpu", 0), case.param("peer", -1)
        seen = torch.cuda.device_count()
        for idx in (gpu, peer):
            if idx >= seen:
                raise SkipCase(f"GPU {idx} is not here: this process sees {seen} GPU(s)")
        prev = torch.cuda.current_device()
        torch.cuda.set_device(gpu)   # the timed loop makes its events on the current device
        pools: list[Pool] = []
        try:
            return self._build(case, gpu, peer, prev, pools)
        except BaseException:
            buffers.release_all(pools, torch.cuda.synchronize)
            torch.cuda.set_device(prev)
            raise

    def _build(self, case: Case, gpu: int, peer: int, prev: int, pools: list[Pool]) -> CopyState:
        import torch

        from ...measure.native_loop import NativeOp
        from . import native

        engine, memory = case.param("engine", "ce"), case.param("memory", "pinned")
        bidir = case.op == "bidir"
        extra: dict = {}
        if case.op in PAIR_OPS:
            reach = native.enable_peer(gpu, peer) and (not bidir or native.enable_peer(peer, gpu))
            extra["peer_access"] = reach
            if engine == "sm" and not reach:
                raise SkipCase(f"GPUs {gpu} and {peer} have no peer access: an SM copy between them needs it "
                               f"(engine ce goes through the host)")
        size = case.size_bytes
        span = int(case.param("buffer_span_bytes", ROTATION_SPAN_BYTES))
        slots = buffers.slot_count(size, span)   # one slot without a span
        stride = buffers.slot_stride(size)
        src_place, dst_place = _places(case.op, memory)
        dst_gpu = peer if case.op in PAIR_OPS else gpu

        def pool(place: str, on_gpu: int) -> Pool:
            pools.append(Pool.make(place, on_gpu, stride * slots))
            return pools[-1]

        dirs = [Direction(pool(src_place, gpu), pool(dst_place, dst_gpu), 0)]
        if bidir:
            dirs.append(Direction(pool("device", peer), pool("device", gpu), 1))
        for d in dirs:
            d.src.fill(d.seed)
        ctas = 0
        if engine == "sm":
            ctas = int(case.param("sm_ctas", 0)) or native.sm_ctas(gpu)
            extra["sm_ctas"] = ctas
        op = native.CopyOp(engine=native.ENGINES[engine], bidir=int(bidir), dst=dirs[0].dst.ptr,
                           src=dirs[0].src.ptr, bytes=size, stride=stride, slots=slots, next=0, dev=gpu,
                           dev2=peer if bidir else gpu, blocks=ctas, blocks2=ctas)
        if bidir:
            op.dst2, op.src2 = dirs[1].dst.ptr, dirs[1].src.ptr
            if engine == "sm" and not case.param("sm_ctas", 0):
                op.blocks2 = native.sm_ctas(peer)
            native.bidir_make(op)
        devices = tuple(sorted({gpu, dst_gpu}))
        for dev in devices:
            torch.cuda.synchronize(dev)
        extra["buffer_rotations"] = slots
        extra["gpu_bus_id"] = _bus_id(gpu)   # the bound finds the GPU by it (CUDA_VISIBLE_DEVICES may renumber)
        if case.op in PAIR_OPS:
            extra["peer_bus_id"] = _bus_id(peer)
        state = CopyState(op, dirs, pools, devices, count=size // buffers.ELEMENT_BYTES, prev_device=prev,
                          bidir=bidir, stream=torch.cuda.Stream(device=gpu), extra=extra)
        state.native = NativeOp(fn=native.enqueue_fn(), arg=ctypes.addressof(op), describe=native.describe,
                                keep=(op,))
        return state

    def run(self, state: CopyState) -> None:
        from . import native

        native.enqueue(state.op, state.stream.cuda_stream)

    def check(self, state: CopyState) -> int:
        """After timing: clear each destination's first slot, copy once more, compare it
        (``count`` int32 elements per copy)."""
        self._sync(state)
        for d in state.directions:
            d.dst.clear(state.count)
        self._sync(state)
        state.op.next = 0
        self.run(state)
        state.stream.synchronize()
        self._sync(state)
        return sum(d.wrong(state.count) for d in state.directions)

    @staticmethod
    def _sync(state: CopyState) -> None:
        import torch

        for dev in state.devices:
            torch.cuda.synchronize(dev)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        return Traffic(case.size_bytes * (2 if case.op == "bidir" else 1), 1.0)

    def memory_bytes(self, case: Case, world_size: int):
        """Device pools and the pattern's chunk on the busiest GPU the copy touches (memory.py);
        host memory is not counted."""
        from .memory import copy_plan

        return copy_plan(case, int(case.param("buffer_span_bytes", ROTATION_SPAN_BYTES)))

    def teardown(self, state: CopyState) -> None:
        import torch

        from . import native

        try:
            if state.bidir:
                native.bidir_free(state.op)
            buffers.release_all(state.pools, lambda: self._sync(state))
        finally:
            torch.cuda.set_device(state.prev_device)


FAMILY = Copy()
