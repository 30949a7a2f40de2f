"""What UCCL-EP (its DeepEP-compatible wrapper, the ``uccl_ep`` backend) can run, so a Case outside
it is skipped with the reason before anything starts UCCL-EP's proxies (docs/families/moe.md).

Read from UCCL's sources at commit da914a2 (ep/bench/buffer.py ``get_dispatch_config`` and
``get_combine_config``): the wrapper has dispatch and combine configurations for these EP rank
counts only and asserts on any other. At 1 rank its Buffer was seen to crash the process (signal
11, H100, 2026-12-07) before that assertion, so the check must come first. UCCL-EP also refuses
ranks that share one GPU ("Duplicate physical GPU rank mapping"); that error is its own and is
kept as the skip reason when it comes.
"""
from __future__ import annotations

UCCL_EP_COMMIT = "da914a2"
UCCL_EP_RANKS = (2, 4, 8, 16, 24, 32, 64, 128, 144, 160)   # buffer.py config_map keys


def refusal(*, ranks: int, low_latency: bool = False) -> tuple[str, str] | None:
    """(suite field to blame, reason) when UCCL-EP cannot take this many EP ranks; None when it can.
    Low-latency mode has no configuration table; its 1-rank Buffer crashed like the normal one."""
    if low_latency:
        if ranks < 2:
            return ("ranks", f"UCCL-EP ({UCCL_EP_COMMIT}) low-latency mode needs 2 or more ranks "
                             "(at 1 rank its Buffer crashed the process)")
        return None
    if ranks not in UCCL_EP_RANKS:
        return ("ranks", f"UCCL-EP ({UCCL_EP_COMMIT}) has dispatch/combine configurations for "
                         f"{list(UCCL_EP_RANKS)} ranks, not {ranks}")
    return None
