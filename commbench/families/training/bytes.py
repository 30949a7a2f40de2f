"""Bytes each rank sends per step, from the shape alone (docs/families/training.md).

Convention (the one nccl-tests' busbw uses, so bytes / time is a busbw): a
ring all-gather or reduce-scatter of a whole buffer of S bytes over n ranks
sends S(n-1)/n from each rank, an all-reduce 2S(n-1)/n, an all-to-all of an
S-byte send buffer S(n-1)/n, a send to another rank its bytes. `bus_bytes`
applies it; the schedules count the tensors they really pass to collectives
with the same function (the `_measured` column), the formulas below derive
the total from the shape (the formula column).
"""
from __future__ import annotations

from .shapes import Shape

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send")


def bus_bytes(kind: str, nbytes: int, n: int) -> float:
    """Bytes one rank sends in a ring implementation of `kind` (see module doc)."""
    if kind == "send":
        return float(nbytes)
    if n <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * nbytes * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return float(nbytes) * (n - 1) / n
    raise ValueError(f"unknown collective kind {kind!r}")


def layer_weight_sizes(s: Shape) -> list[int]:
    """Elements of one layer's weights in model order: QKV, attention output, gate+up, down."""
    h = s.hidden
    return [h * s.qkv_cols, s.heads * s.head_dim * h, 2 * h * s.ffn, s.ffn * h]


def padded(numel: int, n: int) -> int:
    """numel rounded up to a multiple of n (shards of equal size, as FSDP and Megatron pad)."""
    return -(-numel // n) * n


def default_bucket_params(dp: int) -> int:
    """Megatron's bucket size: max(40M, 1M x data-parallel ranks) parameters."""
    return max(40_000_000, 1_000_000 * dp)


def bucket_sizes(s: Shape) -> list[list[tuple[int, int]]]:
    """distopt buckets in backward order: each a list of (layer, weight index).

    Weights join the open bucket in the order backward produces their
    gradients (last layer first, down projection first); a bucket closes once
    it holds at least `bucket_params`. Without overlap_grad_reduce: one bucket.
    """
    order = [(layer, w) for layer in reversed(range(s.layers)) for w in (3, 2, 1, 0)]
    if not s.p("overlap_grad_reduce"):
        return [order]
    limit = s.p("bucket_params") or default_bucket_params(s.world)
    sizes = layer_weight_sizes(s)
    buckets, current, filled = [], [], 0
    for item in order:
        current.append(item)
        filled += sizes[item[1]]
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def step_bytes(s: Shape) -> dict[str, float]:
    """Bytes sent per rank per step, by collective kind (formula), and their 'total'."""
    out = dict.fromkeys(KINDS, 0.0)
    fn = {"fsdp": _fsdp, "distopt": _distopt, "tp": _tp, "cp": _cp}[s.op]
    fn(s, out)
    out["total"] = sum(out[k] for k in KINDS)
    return out


def _fsdp(s: Shape, out: dict) -> None:
    flat = padded(s.layer_params, s.shard)
    gathers = 2 if s.p("reshard_after_forward") else 1
    out["all_gather"] += s.layers * gathers * bus_bytes("all_gather", flat * s.elem_bytes, s.shard)
    out["reduce_scatter"] += s.layers * bus_bytes("reduce_scatter", flat * s.reduce_bytes, s.shard)
    shard_bytes = flat // s.shard * s.reduce_bytes
    out["all_reduce"] += s.layers * bus_bytes("all_reduce", shard_bytes, s.replicate)


def _distopt(s: Shape, out: dict) -> None:
    sizes = layer_weight_sizes(s)
    for bucket in bucket_sizes(s):
        numel = padded(sum(sizes[w] for _layer, w in bucket), s.world)
        out["reduce_scatter"] += bus_bytes("reduce_scatter", numel * s.reduce_bytes, s.world)
        out["all_gather"] += bus_bytes("all_gather", numel * s.elem_bytes, s.world)


def _tp(s: Shape, out: dict) -> None:
    act = s.tokens * s.hidden * s.elem_bytes       # one [tokens, hidden] activation
    t = s.world
    if s.p("sequence_parallel"):
        # forward: 2 x (all-gather in, reduce-scatter out); backward: the transposes (2 + 2)
        # plus the re-gathered inputs of the two column-parallel weight-gradient GEMMs
        out["all_gather"] += s.layers * 6 * bus_bytes("all_gather", act, t)
        out["reduce_scatter"] += s.layers * 4 * bus_bytes("reduce_scatter", act, t)
    else:
        out["all_reduce"] += s.layers * 4 * bus_bytes("all_reduce", act, t)


def _cp(s: Shape, out: dict) -> None:
    e, d = s.elem_bytes, s.head_dim
    kv_local = 2 * s.tokens * s.kv_heads * d * e     # this rank's K and V (before any exchange)
    a, ring = s.a2a_size, s.ring_size
    comm = s.p("cp_comm")
    if comm in ("a2a", "a2a+p2p"):
        qkvo = (2 * s.heads + 2 * s.kv_heads) * s.tokens * d * e   # q, k, v in and the output back
        out["all_to_all"] += s.layers * 2 * bus_bytes("all_to_all", qkvo, a)   # forward + backward
    if comm in ("p2p", "a2a+p2p") and ring > 1:
        # forward: K/V to the next rank ring-1 times; backward: K/V again ring-1 times and the
        # K/V gradients ring times (the last hop returns them to their owner)
        out["send"] += s.layers * (3 * ring - 2) * kv_local
    if comm == "all_gather":
        # forward all-gather of K/V, backward reduce-scatter of their gradients
        out["all_gather"] += s.layers * bus_bytes("all_gather", ring * kv_local, ring)
        out["reduce_scatter"] += s.layers * bus_bytes("reduce_scatter", ring * kv_local, ring)
