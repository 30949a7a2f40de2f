"""What DeepEP v1.2.1 (the baseline commbench measures against) can run, so a Case or a benchmark
shape outside it is skipped with DeepEP's reason before anything calls DeepEP (docs/families/moe.md,
"DeepEP's limits"). Read from DeepEP's sources (csrc/kernels/launch.cuh, configs.cuh,
intranode.cu, internode_ll.cu, deep_ep.cpp); DeepEP itself stops on these with a host assertion
("Unsupported hidden", "Unsupported ranks").

Low-latency kernels (``deepep_ll``): hidden one of the sizes DeepEP compiles them for; at most 11
experts per token; the experts a multiple of the ranks; fewer than 8 ranks or a multiple of 8;
ranks x tokens per rank a multiple of 4 (TMA). (FP8 dispatch needs hidden a multiple of 512,
which every hidden size it is built for is.)

Normal kernels (``deepep``): commbench builds DeepEP's buffer for NVLink peers only (no RDMA
buffer), where DeepEP has kernels for 2, 4 and 8 ranks, all on one node; the experts a multiple of
the ranks and at most 128 per rank (the notify kernel's threads); rows of whole 16-byte vectors.
"""
from __future__ import annotations

DEEPEP_VERSION = "1.2.1"
LL_HIDDEN = (2048, 2560, 4096, 5120, 6144, 7168, 8192)   # launch.cuh SWITCH_HIDDEN
LL_MAX_TOPK = 11                                         # internode_ll.cu kNumMaxTopK
NVL_PEERS = 8                                            # configs.cuh NUM_MAX_NVL_PEERS
NORMAL_RANKS = (2, 4, 8)                                 # launch.cuh SWITCH_RANKS (intranode)
NORMAL_MAX_LOCAL_EXPERTS = 128                           # intranode.cu notify_dispatch kNumThreads
VECTOR_BYTES = 16                                        # sizeof(int4)


def _who(kernels: str) -> str:
    return f"DeepEP v{DEEPEP_VERSION}'s {kernels} kernels"


def ll_refusal(*, hidden: int, topk: int, experts: int, ranks: int,
               tokens: int | None = None) -> tuple[str, str] | None:
    """(suite field to blame, reason) when DeepEP's low-latency kernels cannot take this shape;
    None when they can. ``tokens``: tokens per rank (the buffer's maximum), when known."""
    who = _who("low-latency")
    if hidden not in LL_HIDDEN:
        return ("params.hidden", f"{who} are built for hidden in {list(LL_HIDDEN)}, not {hidden}")
    if topk > LL_MAX_TOPK:
        return ("params.topk", f"{who} take topk <= {LL_MAX_TOPK}, not {topk}")
    if experts % ranks:
        return ("params.experts", f"{who} need the experts ({experts}) a multiple of the ranks ({ranks})")
    if ranks >= NVL_PEERS and ranks % NVL_PEERS:
        return ("ranks", f"{who} take fewer than {NVL_PEERS} ranks or a multiple of {NVL_PEERS}, not {ranks}")
    if tokens is not None and (ranks * tokens) % 4:
        return ("params.tokens", f"{who} need ranks x tokens per rank a multiple of 4 (TMA), got "
                                 f"{ranks} x {tokens}")
    return None


def normal_refusal(*, ranks: int, ranks_per_node: int, experts: int, hidden: int,
                   elem_bytes: int = 2) -> tuple[str, str] | None:
    """(suite field to blame, reason) when DeepEP's normal (NVLink) kernels, as commbench builds
    their buffer, cannot take this launch and shape; None when they can."""
    who = _who("normal")
    if ranks not in NORMAL_RANKS:
        return ("ranks", f"{who} have intranode configurations for {list(NORMAL_RANKS)} ranks, not {ranks}")
    if ranks_per_node < ranks:
        return ("ranks_per_node", f"{who} run here over NVLink within one node: all {ranks} ranks on one node "
                                  f"(this launch puts {ranks_per_node} per node)")
    if experts % ranks:
        return ("params.experts", f"{who} need the experts ({experts}) a multiple of the ranks ({ranks})")
    if experts // ranks > NORMAL_MAX_LOCAL_EXPERTS:
        return ("params.experts", f"{who} take at most {NORMAL_MAX_LOCAL_EXPERTS} experts per rank, not "
                                  f"{experts // ranks} ({experts} over {ranks} ranks)")
    if (hidden * elem_bytes) % VECTOR_BYTES:
        return ("params.hidden", f"{who} move rows of whole {VECTOR_BYTES}-byte vectors: hidden {hidden} x "
                                 f"{elem_bytes} B is not")
    return None
