"""Device memory per Case: a family's plan, the fit check before set-up, what the Case really
took, and giving it all back before the next Case (docs/results.md: mem_* columns).

A family's ``memory_bytes(case, world_size)`` returns a :class:`MemoryPlan`: the bytes one rank
allocates on its GPU, by named part (weights, buffers, workspace, symmetric heap, check, ...).
Before set-up the runner holds it against the memory this rank may use: the GPU's free memory
divided by the ranks bound to that GPU. A Case that cannot fit is skipped with
"needs X GiB, Y GiB free on <GPU>" instead of failing by an out-of-memory error halfway.

The probe of the GPU (free bytes and name) is one function, :func:`probe`, so CPU tests put a
stand-in there (a fake amount of free memory).
"""
from __future__ import annotations

import gc
import sys
from dataclasses import dataclass

GIB = float(1 << 30)
# Kept free beside a plan: the CUDA context's growth in set-up (cuBLAS/cuDNN workspaces, kernel
# modules, NCCL's internal buffers) and the caching allocator's rounding. A Case whose plan fits
# only without it would meet an out-of-memory error at its first GEMM.
HEADROOM_BYTES = 1 << 30
# torch memory still allocated after a Case's teardown beyond what was allocated before it: more
# than this means references were left behind (a reference cycle); gc.collect frees them.
LEFT_BEHIND_BYTES = 64 << 20
OOM_MARKERS = ("out of memory", "outofmemory", "cudaerrormemoryallocation", "cuda_error_out_of_memory",
               "failed to allocate", "nvshmem_malloc")


@dataclass(frozen=True)
class MemoryPlan:
    """Device bytes one rank of a Case allocates, by named part; ``peak_bytes`` is the most it holds
    at once. ``parts`` that live together sum; ``transient`` parts (built and dropped in one phase:
    the check's reference, weight generation) count only with the largest of them. ``note`` says
    what the plan leaves out."""

    parts: tuple[tuple[str, int], ...]
    transient: tuple[tuple[str, int], ...] = ()
    note: str = ""

    @classmethod
    def of(cls, parts: dict[str, float], transient: dict[str, float] | None = None,
           note: str = "") -> "MemoryPlan":
        clean = lambda d: tuple((k, int(v)) for k, v in (d or {}).items() if v and v > 0)  # noqa: E731
        return cls(clean(parts), clean(transient), note)

    @property
    def resident_bytes(self) -> int:
        return sum(b for _, b in self.parts)

    @property
    def peak_bytes(self) -> int:
        return self.resident_bytes + max((b for _, b in self.transient), default=0)

    def text(self) -> str:
        """'24.1 GiB: weights 22.5 GiB + buffers 1.1 GiB + at most 0.5 GiB (check)'."""
        items = [f"{name} {gib(b)}" for name, b in sorted(self.parts, key=lambda p: -p[1])]
        if self.transient:
            name, b = max(self.transient, key=lambda p: p[1])
            items.append(f"at most {gib(b)} ({name})")
        return f"{gib(self.peak_bytes)}: " + " + ".join(items) if items else gib(0)


TORCH_ALLOC_BLOCK_BYTES = 512   # torch's caching allocator rounds every allocation up to this


def torch_alloc_bytes(nbytes: int) -> int:
    """What torch's caching allocator takes for a tensor of ``nbytes``: a plan's small tensors."""
    return -(-nbytes // TORCH_ALLOC_BLOCK_BYTES) * TORCH_ALLOC_BLOCK_BYTES


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


@dataclass(frozen=True)
class DeviceFree:
    """What this rank may use on its GPU: the free bytes seen now, its share (free divided by the
    ranks bound to the GPU) and the GPU's name."""

    free_bytes: int
    share_bytes: int
    name: str


def probe(device: str) -> tuple[int, str] | None:
    """(free bytes, GPU name) of a CUDA device, or None off a GPU. The one boundary to the device:
    tests replace it with a stand-in."""
    torch = sys.modules.get("torch")
    if torch is None or not str(device).startswith("cuda") or not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free), torch.cuda.get_device_name(device)


def device_free(device: str, ranks_per_gpu: int | None) -> DeviceFree | None:
    seen = probe(device)
    if seen is None:
        return None
    free, name = seen
    return DeviceFree(free, free // max(1, ranks_per_gpu or 1), name)


def torch_held_bytes(device: str) -> int | None:
    """Bytes torch's tensors hold on ``device`` now (None without torch on a GPU). Between Cases it
    should be about 0: when ``mem_free_bytes`` falls from Case to Case while this stays near 0, the
    memory is held outside torch's allocator (NCCL, the CUDA context, IPC mappings); when this grows,
    references to earlier Cases' tensors were kept."""
    torch = _torch_cuda()
    return None if torch is None else int(torch.cuda.memory_allocated(device))


def fit_reason(plan: MemoryPlan, free: DeviceFree, ranks_per_gpu: int | None) -> str | None:
    """Why the plan cannot fit this rank's share of the GPU (skip reason), or None when it fits."""
    need = plan.peak_bytes
    if need + HEADROOM_BYTES <= free.share_bytes:
        return None
    sharing = ranks_per_gpu or 1
    where = (f"{gib(free.share_bytes)} of {gib(free.free_bytes)} free on {free.name} "
             f"({sharing} ranks share it)" if sharing > 1 else f"{gib(free.free_bytes)} free on {free.name}")
    return (f"needs {gib(need)} per rank, {where} (and {gib(HEADROOM_BYTES)} kept for the CUDA "
            f"context and workspaces); the plan: {plan.text()}")


def is_out_of_memory(reason: str) -> bool:
    text = (reason or "").lower().replace(" ", "")
    return any(m.replace(" ", "") in text for m in OOM_MARKERS)


def oom_context(plan: MemoryPlan | None, free: DeviceFree | None) -> str:
    """What the runner adds to an out-of-memory failure: the estimate and the free memory before."""
    est = f"estimate {plan.text()}" if plan is not None else "no estimate (the family has no memory plan)"
    if free is not None:
        est += f"; {gib(free.share_bytes)} was free for this rank on {free.name} before the Case"
    return f" [memory: {est}]"


class CaseMemory:
    """torch's view of one Case on one rank: the peak it allocated above what was allocated when
    it began, plus what set-up took outside torch's allocator (NVSHMEM heaps, CUDA IPC buffers,
    NCCL) when the rank has the GPU to itself."""

    def __init__(self, device: str, free: DeviceFree | None, shared: bool):
        self.torch = _torch_cuda() if free is not None else None
        self.device, self.free, self.shared = device, free, shared
        self.base_allocated = self.base_reserved = 0
        self.outside_bytes = 0
        if self.torch is not None:
            cuda = self.torch.cuda
            cuda.reset_peak_memory_stats(device)
            self.base_allocated = cuda.memory_allocated(device)
            self.base_reserved = cuda.memory_reserved(device)

    def after_setup(self) -> None:
        """Device memory set-up took outside torch: the drop in free memory that torch's own
        reserve growth does not explain (only when no other rank shares the GPU)."""
        if self.torch is None or self.shared:
            return
        seen = probe(self.device)
        if seen is None:
            return
        cuda = self.torch.cuda
        grown = cuda.memory_reserved(self.device) - self.base_reserved
        self.outside_bytes = max(0, self.free.free_bytes - seen[0] - grown)

    def peak_bytes(self) -> int | None:
        if self.torch is None:
            return None
        torch_peak = self.torch.cuda.max_memory_allocated(self.device) - self.base_allocated
        return max(0, torch_peak) + self.outside_bytes

    def release(self, failed: bool) -> None:
        """Give the Case's memory back: cached blocks, and (after a failure, or when torch still
        holds more than before the Case) the reference cycles only gc.collect finds."""
        release_cached_memory()
        if self.torch is None:
            return
        left = self.torch.cuda.memory_allocated(self.device) - self.base_allocated
        if failed or left > LEFT_BEHIND_BYTES:
            gc.collect()
            release_cached_memory()


def _torch_cuda():
    """torch, when it is loaded and has CUDA initialised (else None: nothing to track)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized() else None


def release_cached_memory() -> None:
    """Give cached device memory back between Cases: torch's and cupy's pools would otherwise
    keep a large Case's buffers and starve the next Case's non-pooled allocations (NCCL, IPC).
    (No gc.collect here: with torch loaded it costs ~150 ms per Case; CaseMemory.release calls it
    only when a Case left memory behind.)"""
    torch = _torch_cuda()
    if torch is not None:
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
