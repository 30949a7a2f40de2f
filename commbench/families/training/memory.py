"""The device memory of one rank of a training Case (TrainingFamily.memory_bytes), by part.

Counted from what each schedule allocates (distopt.py, fsdp.py, tp.py, cp.py) and what its check
builds (reference.py: whole weights, the single-process model's activations and gradients, the
FP32 sums it compares with), for P = layer_params x layers weights:

- resident: the schedule's parameters, gradients, shards and optimizer state (distopt: BF16
  parameters and reduce-dtype gradients in buckets, this rank's shard of each plus its FP32 master);
- the step: the activations autograd keeps per layer (x, the norms, QKV, attention, the MLP's
  gate/up, SwiGLU and output) for the tokens this rank computes, and one layer's backward;
- the check (transient, after the timed steps): whole weights, the reference's activations and
  gradients, FP32 sums, and the observed steps' cloned tensors.

Attention is SDPA's fused kernel (no [seq, seq] scores); NCCL's own buffers are not counted (the
runner keeps a headroom for them and the CUDA context).
"""
from __future__ import annotations

from ... import dtypes
from ...measure.memory import MemoryPlan
from .shapes import Shape

F32 = 4


def activations(s: Shape, tokens: int, heads_share: float = 1.0, ffn_share: float = 1.0) -> float:
    """Bytes autograd keeps for one layer of `tokens` rows (heads and FFN split by tensor parallel)."""
    attn_cols = (s.qkv_cols + 2 * s.heads * s.head_dim) * heads_share
    return tokens * (6 * s.hidden + attn_cols + 4 * s.ffn * ffn_share) * s.elem_bytes


def _step(s: Shape, tokens: int, layer_weights: float, heads_share: float = 1.0,
          ffn_share: float = 1.0) -> dict:
    act = activations(s, tokens, heads_share, ffn_share)
    return {"activations": s.layers * act, "inputs": 2 * tokens * s.hidden * s.elem_bytes,
            "backward": layer_weights + act}


def _compare(s: Shape, whole_tokens: int) -> float:
    """numerics.Tally.close on the largest tensor it compares (gate/up weight, or the output rows):
    both sides in FP32, their difference, its magnitude and the tolerance (about 6 FP32 copies)."""
    largest = max(s.hidden * 2 * s.ffn, s.hidden * s.qkv_cols, whole_tokens * s.hidden)
    return 6 * F32 * largest


def _reference(s: Shape, tokens: int) -> float:
    """run_model: whole weights' gradients and every layer's activations for `tokens` rows."""
    P = s.layer_params * s.layers
    return P * s.elem_bytes + s.layers * activations(s, tokens) + 2 * tokens * s.hidden * s.elem_bytes


def _distopt(s: Shape) -> tuple[dict, dict, dict]:
    P, W, e, r = s.layer_params * s.layers, s.world, s.elem_bytes, s.reduce_bytes
    resident = {"parameters": P * e, "gradients": P * r, "shards and FP32 master": P / W * (r + e + F32)}
    if s.p("fault") == "stale":
        resident["stale copy"] = P * e
    looks = 2 * (P * e + P / W * r + 2 * s.tokens * s.hidden * e)   # two observed steps
    updated = 2 * F32 * s.hidden * 2 * s.ffn   # the expected update of one weight, in FP32
    check = P * e + 4 * P * F32 + _reference(s, s.tokens) + looks + updated + _compare(s, s.tokens)
    return resident, _step(s, s.tokens, s.layer_params * e), {"check": check}


def _fsdp(s: Shape) -> tuple[dict, dict, dict]:
    L, e, r = s.layer_params, s.elem_bytes, s.reduce_bytes
    P, shard = L * s.layers, s.shard
    resident = {"parameter shards": P / shard * e, "gradient shards": P / shard * r}
    step = _step(s, s.tokens, L * e)
    step["gathered layers"] = (s.layers if not s.p("reshard_after_forward") else 2) * L * e
    looks = 2 * s.layers * L * e + P / shard * r
    check = P * e + P * F32 + _reference(s, s.tokens) + looks + _compare(s, s.tokens)
    return resident, step, {"check": check}


def _tp(s: Shape) -> tuple[dict, dict, dict]:
    P, t, e = s.layer_params * s.layers, s.world, s.elem_bytes
    resident = {"weight shards": P / t * e, "weight gradients": P / t * e}
    step = _step(s, s.tokens, s.layer_params / t * e, 1.0 / t, 1.0 / t)
    check = P * e + _reference(s, s.tokens) + P / t * e + 2 * s.tokens * s.hidden * e + _compare(s, s.tokens)
    return resident, step, {"check": check}


def _cp(s: Shape) -> tuple[dict, dict, dict]:
    P, e = s.layer_params * s.layers, s.elem_bytes
    whole = s.micro_batch * s.seq_len
    resident = {"weights": P * e, "weight gradients": P * e}
    step = _step(s, s.tokens, s.layer_params * e)
    step["attention accumulators"] = 2 * s.tokens * s.heads * s.head_dim * F32
    check = P * e + _reference(s, whole) + P * e + 2 * whole * s.hidden * e + _compare(s, whole)
    return resident, step, {"check": check}


PLANS = {"distopt": _distopt, "fsdp": _fsdp, "tp": _tp, "cp": _cp}


def step_plan(s: Shape) -> MemoryPlan | None:
    """The plan of a GPU training Case; None for an op without one."""
    make = PLANS.get(s.op)
    if make is None or s.elem_bytes <= 0 or not dtypes.size_bytes(s.reduce_dtype):
        return None
    resident, step, check = make(s)
    return MemoryPlan.of(resident, {"step": sum(step.values()), **check},
                         note="NCCL's buffers and the CUDA context are not counted")
