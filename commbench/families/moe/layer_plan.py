"""Planning the MoE `layer` op on the CPU: presets into Cases, suite checks, impossible combinations.

Nothing here touches a GPU: `validate`, `list` and the planner call it.
"""
from __future__ import annotations

import dataclasses

from . import deepep_limits, uccl_ep_limits
from .presets import layer_tokens, resolve

OVERLAPS = ("none", "two_batch")
GEMMS = ("auto", "grouped_mm", "loop", "fused")
# DeepEP's own limits (hidden sizes, topk, rank counts) live in deepep_limits, with their sources


LAYER_ONLY = ("phase", "tokens", "intermediate", "overlap", "gemm")


def finalize(case, explicit: frozenset):
    """Apply the model preset; for the layer, also the phase's token count and the size it gives.

    The other ops do not carry the layer's parameters (nor `model: custom`), so their
    Cases, ids and columns stay what they were before the layer existed."""
    params = resolve(dict(case.params), explicit)
    size = case.size_bytes
    if case.op == "layer":
        params["tokens"] = layer_tokens(params)
        size = params["tokens"] * params["hidden"] * 2
    else:
        for key in LAYER_ONLY:
            params.pop(key, None)
        if params.get("model") == "custom":
            del params["model"]
    return dataclasses.replace(case, params=tuple(params.items()), size_bytes=size)


def validate(bench: dict) -> list[tuple[str, str]]:
    """Suite-level problems of a moe benchmark (field, message)."""
    ops = bench.get("ops", [])
    ops = ops if isinstance(ops, list) else [ops]
    params = bench.get("params") or {}
    if "layer" in ops and len(ops) > 1:
        return [("ops", "the layer op runs in a benchmark of its own (its tokens come from "
                        "params.phase or params.tokens, not from sizes)")]
    if "layer" in ops and "sizes" in bench:
        return [("sizes", "the layer op takes its tokens per rank from params.tokens or "
                          "params.phase (prefill 4096, decode 128), not from sizes: drop sizes")]
    if "layer" not in ops:
        extra = [k for k in LAYER_ONLY if isinstance(params, dict) and k in params]
        if extra:
            return [(f"params.{extra[0]}", "applies to the layer op only (ops: [layer])")]
    return []


def impossible(case, prm: dict) -> tuple[str, str] | None:
    """Why a layer Case can never run (knowable from the suite alone), as (suite field to blame,
    reason), or None. The layer's own parameters (intermediate, tokens) are checked by their Params."""
    tokens = case.size_bytes // (2 * prm["hidden"])
    if prm["overlap"] == "two_batch" and tokens < 2:
        return ("params.tokens", "two_batch overlap splits the tokens into two micro-batches: "
                                 "it needs >= 2 tokens")
    deepep = deepep_refusal(case, prm)
    if deepep:
        return deepep
    if case.timing == "graph":
        if case.backend in ("deepep", "uccl_ep"):
            who = "DeepEP" if case.backend == "deepep" else "UCCL-EP (DeepEP's API)"
            return ("timing", f"{who}'s normal dispatch waits on the host for the received counts: "
                              "it cannot be captured in a CUDA graph")
        if prm["gemm"] == "loop":
            return ("params.gemm", "the per-expert GEMM loop reads group sizes on the host: no CUDA graph")
    return None


def deepep_refusal(case, prm: dict) -> tuple[str, str] | None:
    """DeepEP's own limits for a Case of the deepep (normal) or deepep_ll (low-latency) backend, and
    UCCL-EP's for the uccl_ep backend, any op, as (suite field to blame, reason); None for other
    backends or a shape the library takes."""
    if case.backend == "deepep":
        return deepep_limits.normal_refusal(ranks=case.ranks, ranks_per_node=case.ranks_per_node or case.ranks,
                                            experts=prm["experts"], hidden=prm["hidden"])
    if case.backend == "deepep_ll":
        return deepep_limits.ll_refusal(hidden=prm["hidden"], topk=prm["topk"], experts=prm["experts"],
                                        ranks=case.ranks)
    if case.backend in ("uccl_ep", "uccl_ep_ll"):
        return uccl_ep_limits.refusal(ranks=case.ranks, low_latency=case.backend == "uccl_ep_ll")
    return None
