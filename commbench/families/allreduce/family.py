"""All-reduce algorithms side by side: NCCL (per algorithm/protocol), NCCL symmetric
buffers, torch symmetric memory, and commbench's own one-shot/two-shot kernels.

Multicast Cases (torch_multimem, NCCL_ALGO naming NVLS/NVLSTree) pass the gate
of the multicast rules (docs/design.md) or are skipped with commbench.safety's exact reason; every
other Case runs with multicast switched off in its process.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ...comm import nccl_algos
from ...comm.context import RankContext
from ...errors import SkipCase
from ...sysinfo import nccl_log
from ..base import Case, Family, Param, Traffic, multiple_of
from . import gate
from .data import ELEMENT_BYTES

NCCL_BACKENDS = ("nccl", "nccl_symm")
TORCH_BACKENDS = ("torch_one_shot", "torch_two_shot", "torch_multimem")
CB_BACKENDS = ("cb_one_shot", "cb_two_shot")
MAX_PEER_RANKS = 8


class AllReduceFamily(Family):
    name = "allreduce"
    summary = "all-reduce algorithms side by side (NCCL algos, symmetric memory, own kernels)"
    ops = ("all_reduce",)
    backends = NCCL_BACKENDS + TORCH_BACKENDS + CB_BACKENDS
    dtypes = ("float32", "bfloat16")
    default_dtype = "float32"
    params = {
        "allow_multicast": Param(False, (bool,), "opt in to NVLS/multimem Cases; site kill switches still win"),
        "num_ctas": Param(32, (int,), "CTAs of the cb_* kernels (1..64)", range=(1, 64)),
        "threads_per_cta": Param(512, (int,), "threads per CTA of the cb_* kernels (multiple of 32, <= 1024)",
                                 range=(32, 1024), check=multiple_of(32)),
        "peer_memory": Param("ipc", (str,), "how cb_* kernels map peer buffers: CUDA IPC or torch symmetric memory",
                             choices=("ipc", "torch_symm")),
    }

    # --- planning ---
    def impossible(self, case: Case) -> tuple[str, str] | None:
        if case.dtype not in self.dtypes:
            return ("dtypes", f"dtype {case.dtype} not supported (use {', '.join(self.dtypes)})")
        elem = ELEMENT_BYTES[case.dtype]
        if case.size_bytes < elem or case.size_bytes % elem:
            return ("sizes", f"size {case.size_bytes} B is not a whole number of {case.dtype} elements")
        if case.backend not in NCCL_BACKENDS and case.ranks > MAX_PEER_RANKS:
            return ("ranks", f"{case.backend} uses peer pointers: at most {MAX_PEER_RANKS} ranks")
        if case.backend not in NCCL_BACKENDS and case.ranks_per_node and case.ranks_per_node < case.ranks:
            return ("ranks_per_node", f"{case.backend} uses peer pointers: all ranks must share one node")
        return None

    def machine_reason(self, case: Case) -> str | None:
        # The site's kill switches and the suite's opt-in are visible before launch: such Cases
        # never start a process (DESIGN section 7).
        blocked = gate.planning_block_reason(case)
        if blocked or case.backend != "nccl":   # nccl_symm's symmetric kernels do not follow NCCL_ALGO
            return blocked
        # a forced NCCL_ALGO / NCCL_PROTO NCCL has no all-reduce for (PAT, CollNet off): skipped
        return nccl_algos.case_refusal("all_reduce", case.env, ranks=case.ranks, ranks_per_node=case.ranks_per_node,
                                       multicast=bool(case.param("allow_multicast")), dtype=case.dtype)

    def launch_env(self, case: Case, env: Mapping[str, str], log_dir: Path) -> dict[str, str]:
        # NCCL's choice (nccl_algo, nccl_proto) is read from its TUNING lines, which it writes only
        # when these are set at its first communicator; a user's own NCCL_DEBUG_FILE is kept.
        if case.backend not in NCCL_BACKENDS:
            return {}
        return nccl_log.debug_env(Path(log_dir) / "nccl", current=env)

    # --- measuring ---
    def setup(self, case: Case, ctx: RankContext):
        ordinal = int(str(ctx.device).partition(":")[2] or 0)
        # The gate comes first, so a multicast Case is always skipped with the gate's reason.
        reason = gate.runtime_block_reason(case, ordinal)
        if reason:
            raise SkipCase(reason)
        if not str(ctx.device).startswith("cuda"):
            raise SkipCase("allreduce needs a CUDA GPU")
        if not gate.case_requests_multicast(case):
            refusal = gate.multicast_off_refusal()
            if refusal:
                raise SkipCase(refusal)
        import torch

        torch.cuda.set_device(ordinal)
        if case.backend in NCCL_BACKENDS:
            from . import nccl_backend as backend
        elif case.backend in TORCH_BACKENDS:
            from . import symm_backend as backend
        elif case.backend in CB_BACKENDS:
            from . import cb_backend as backend
        else:
            raise SkipCase(f"unknown backend {case.backend!r}")
        state = backend.setup(case, ctx)
        state.extra.setdefault("multicast", gate.case_requests_multicast(case))
        return state

    def run(self, state) -> None:
        state.enqueue()

    def check(self, state) -> int:
        from .state import verify

        return verify(state)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        # nccl-tests all_reduce: algbw = size / t, busbw = algbw * 2(n-1)/n.
        return Traffic(algbw_bytes=float(case.size_bytes), bus_factor=2.0 * (world_size - 1) / world_size)

    def memory_bytes(self, case: Case, world_size: int):
        """GPU buffers per rank and the check's chunk (memory.py), held against the free memory."""
        from .memory import allreduce_plan

        return allreduce_plan(case, world_size)

    def teardown(self, state) -> None:
        state.close()


FAMILY = AllReduceFamily()
