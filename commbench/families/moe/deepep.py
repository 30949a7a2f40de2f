"""Real DeepEP (deep_ep.Buffer, normal intranode mode) when it is importable, and UCCL-EP through
its DeepEP-compatible wrapper (the `uccl_ep` backend: the same Buffer API over UCCL's CPU proxies).

Same inputs and routing as our kernels; combine sums the returned rows per
token (DeepEP's intranode semantics), so the check is x * ranks reached.

UCCL-EP's wrapper is a package named ``deep_ep`` inside UCCL's source (ep/deep_ep_wrapper/deep_ep);
beside DeepEP it must be importable as ``uccl_deep_ep`` (tests/gpu/build_uccl_ep.sh puts it there,
docs/families/moe.md says how). A UCCL-EP that imports but cannot bring its proxies up on this
machine (no RDMA NIC, no peer memory) skips its rows with UCCL-EP's own error.
"""
from __future__ import annotations

import torch

from ...measure.state import CaseState
from ...errors import SkipCase
from . import reference as ref
from .problem import Problem

NVL_BUFFER_BYTES = 1 << 30


# backend -> (the module with DeepEP's Buffer API, the library's name in reasons)
LIBRARIES = {"deepep": ("deep_ep", "DeepEP"), "uccl_ep": ("uccl_deep_ep", "UCCL-EP")}


def import_library(backend: str):
    """The Buffer module of a DeepEP-API backend, or SkipCase naming the import error."""
    import importlib

    module, name = LIBRARIES[backend]
    try:
        return importlib.import_module(module)
    except Exception as exc:  # an ImportError, or the library failing at import
        hint = (" (UCCL-EP's ep/deep_ep_wrapper/deep_ep, importable under that name: "
                "tests/gpu/build_uccl_ep.sh)") if backend == "uccl_ep" else ""
        raise SkipCase(f"{module} is not importable{hint}: {type(exc).__name__}: {exc}") from exc


_uccl_start_failed: str | None = None   # this process's first UCCL-EP start-up failure


def uccl_buffer(lib, group, *args, **kwargs):
    """UCCL-EP's Buffer, explicitly destroyed: it registers its proxies per GPU in a global table
    that only destroy() clears, and a second Buffer on that GPU (the next Case's) would abort the
    process. Its start-up errors (no RDMA device, ranks sharing a GPU, an unsupported set-up it
    asserts on) skip with its own words. A start that failed may have left its proxies registered
    (no Buffer to destroy), so after one every later start in this process is skipped too."""
    global _uccl_start_failed
    if _uccl_start_failed is not None:
        raise SkipCase(f"UCCL-EP failed to start earlier in this launch ({_uccl_start_failed}); "
                       "another start here could abort the process")
    try:
        return lib.Buffer(group, *args, explicitly_destroy=True, **kwargs)
    except BaseException as exc:
        _uccl_start_failed = f"{type(exc).__name__}: {exc}"[:300]
        if isinstance(exc, (RuntimeError, ValueError, OSError, AssertionError)):
            raise SkipCase(f"UCCL-EP could not start here: {type(exc).__name__}: {exc}") from exc
        raise


class DeepEPState(CaseState):
    def __init__(self, p: Problem, op: str, group, device: str, backend: str = "deepep"):
        super().__init__()  # CaseState defaults; fields set below
        lib = import_library(backend)
        name = LIBRARIES[backend][1]
        if p.fp8:
            raise SkipCase(f"the {name} baseline here runs BF16 only")
        self.p, self.op = p, op
        self.device = torch.device(device)
        self.stream = torch.cuda.current_stream(self.device)
        self.extra: dict = {}
        self.explicit = backend == "uccl_ep"
        if self.explicit:
            self.buffer = uccl_buffer(lib, group, NVL_BUFFER_BYTES, 0)
        else:
            self.buffer = lib.Buffer(group, NVL_BUFFER_BYTES, 0)
        # (a failure below leaves the Buffer as it is: destroy() waits for every rank on the GPU)
        idx, w = p.routing.of_rank(p.rank)
        self.x = ref.make_tokens(p.rank, p.tokens, p.hidden, self.device)
        self.topk_idx = idx.to(self.device)
        self.topk_w = w.to(self.device)
        layout = self.buffer.get_dispatch_layout(self.topk_idx, p.experts)
        self.per_rank, _, self.per_expert, self.in_rank, _ = layout
        self.dispatch()

    def dispatch(self) -> None:
        out = self.buffer.dispatch(self.x, topk_idx=self.topk_idx, topk_weights=self.topk_w,
                                   num_tokens_per_rank=self.per_rank,
                                   is_token_in_rank=self.in_rank,
                                   num_tokens_per_expert=self.per_expert)
        self.recv_x, self.handle = out[0], out[4]

    def combine(self) -> None:
        self.out, _, _ = self.buffer.combine(self.recv_x, self.handle)

    def run(self) -> None:
        if self.op != "combine":
            self.dispatch()
        if self.op != "dispatch":
            self.combine()

    def check(self) -> int:
        self.dispatch()
        self.combine()
        expected = self.x.float() * self.in_rank.sum(1, keepdim=True).float()
        diff = ref.calc_diff(self.out.float(), expected)
        self.extra["calc_diff"] = diff
        return self.p.tokens * self.p.hidden if diff >= self.p.diff_max else 0

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        if getattr(self, "explicit", False) and getattr(self, "buffer", None) is not None:
            buffer, self.buffer = self.buffer, None
            buffer.destroy()   # every rank closes its Case together (the runner's teardown)
