"""A Case's training shape: model dimensions, tokens, layers and the parallel layout.

`resolve` turns suite parameters (preset plus explicit overrides) and the
launch's size into one `Shape`; `problems` lists what makes a combination
impossible (a sequence that does not split, tp larger than heads, ...). The
same checks serve `validate` (suite errors with the line) and the Case.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from .params import PARAMS
from .presets import PRESETS


@dataclass(frozen=True)
class Shape:
    op: str
    dtype: str
    reduce_dtype: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    tokens: int          # tokens this rank computes per step (tp: the TP group's micro-batch)
    seq_len: int         # tokens per sequence (cp: the whole sequence, split over the ranks)
    micro_batch: int     # sequences per step
    layers: int
    model_layers: int
    world: int
    ranks_per_node: int
    params: dict         # every family parameter, defaults filled in

    def p(self, name: str):
        return self.params[name]

    @property
    def elem_bytes(self) -> int:
        return dtypes.size_bytes(self.dtype)

    @property
    def reduce_bytes(self) -> int:
        return dtypes.size_bytes(self.reduce_dtype)

    @property
    def qkv_cols(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one layer: QKV, attention output, gate+up, down (norms carry none)."""
        h = self.hidden
        return h * self.qkv_cols + self.heads * self.head_dim * h + 3 * h * self.ffn

    # parallel layout ------------------------------------------------------
    @property
    def replicate(self) -> int:
        return int(self.p("replicate")) if self.op == "fsdp" else 1

    @property
    def shard(self) -> int:
        """fsdp: ranks sharing one copy of the parameters (world / replicate)."""
        return self.world // self.replicate

    @property
    def a2a_size(self) -> int:
        """cp: ranks of one all-to-all group (a2a: all; p2p, all_gather: 1)."""
        comm = self.p("cp_comm")
        if comm == "a2a":
            return self.world
        if comm != "a2a+p2p":
            return 1
        size = int(self.p("cp_a2a_size"))
        if size:
            return size
        if self.ranks_per_node < self.world:
            return self.ranks_per_node
        return max(1, self.world // 2)

    @property
    def ring_size(self) -> int:
        """cp: ranks (or all-to-all groups) around the K/V ring."""
        return self.world // self.a2a_size if self.op == "cp" else 1


def resolve(params: dict, op: str, dtype: str, world: int, ranks_per_node: int | None = None) -> Shape:
    """Fill defaults from the preset and the Param table; no validation (see `problems`)."""
    prm = {k: params.get(k, spec.default) for k, spec in PARAMS.items()}
    preset = PRESETS.get(prm["model"], PRESETS["tiny"])
    hidden = prm["hidden"] or preset.hidden
    heads = prm["heads"] or preset.heads
    kv_heads = prm["kv_heads"] or preset.kv_heads
    head_dim = prm["head_dim"] or (hidden // heads if heads > 0 else 0)
    tokens = prm["tokens_per_rank"]
    if op == "cp":
        seq_len = prm["seq_len"] or tokens * world
        micro_batch = tokens * world // seq_len if seq_len > 0 else 0
    else:
        seq_len = prm["seq_len"] or tokens
        micro_batch = tokens // seq_len if seq_len > 0 else 0
    reduce_dtype = dtype if prm["reduce_dtype"] == "same" else prm["reduce_dtype"]
    return Shape(op=op, dtype=dtype, reduce_dtype=reduce_dtype, hidden=hidden,
                 ffn=prm["ffn"] or preset.ffn, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 tokens=tokens, seq_len=seq_len, micro_batch=micro_batch, layers=prm["layers"],
                 model_layers=preset.model_layers, world=world,
                 ranks_per_node=ranks_per_node or world, params=prm)


def problems(s: Shape) -> list[tuple[str, str]]:
    """(field, message) for each reason this shape cannot run; [] when it can."""
    # a value outside its Param first: the arithmetic below relies on the ranges (no 0 tokens)
    out = [(f"params.{k}", msg) for k, spec in PARAMS.items() if (msg := spec.problem(k, s.params[k]))]
    if out:
        return out
    if s.params["head_dim"] == 0 and s.hidden % s.heads:
        out.append(("params.heads", f"hidden ({s.hidden}) is not a multiple of heads ({s.heads}): "
                                    f"set head_dim"))
    if s.heads % s.kv_heads:
        out.append(("params.kv_heads", f"heads ({s.heads}) must be a multiple of kv_heads ({s.kv_heads})"))
    if s.op == "cp":
        out += _cp_problems(s)
    elif s.tokens % s.seq_len:
        out.append(("params.seq_len", f"tokens_per_rank ({s.tokens}) is not a whole number of "
                                      f"sequences of {s.seq_len}"))
    if s.op == "fsdp" and s.world % s.replicate:
        out.append(("params.replicate", f"replicate ({s.replicate}) must divide the ranks ({s.world})"))
    if s.op == "tp":
        out += _tp_problems(s)
    return out


def _tp_problems(s: Shape) -> list[tuple[str, str]]:
    t, out = s.world, []
    if t > s.heads:
        out.append(("ranks", f"tp over {t} ranks is larger than the {s.heads} attention heads"))
    elif s.heads % t or s.kv_heads % t:
        out.append(("ranks", f"tp over {t} ranks needs heads ({s.heads}) and kv_heads ({s.kv_heads}) "
                             f"divisible by {t}"))
    if s.ffn % t:
        out.append(("params.ffn", f"ffn ({s.ffn}) is not divisible by the {t} tp ranks"))
    if s.params["sequence_parallel"] and s.tokens % t:
        out.append(("params.tokens_per_rank", f"sequence parallel splits the {s.tokens} tokens over "
                                              f"{t} ranks: not divisible"))
    return out


def _cp_problems(s: Shape) -> list[tuple[str, str]]:
    c, out = s.world, []
    if s.seq_len % (2 * c):
        out.append(("params.seq_len", f"cp over {c} ranks splits each sequence into {2 * c} chunks "
                                      f"(two per rank, causal balance): sequence {s.seq_len} does not divide"))
    elif (s.tokens * c) % s.seq_len:
        out.append(("params.tokens_per_rank", f"cp: tokens_per_rank x ranks ({s.tokens * c}) is not a "
                                              f"whole number of sequences of {s.seq_len}"))
    a = s.a2a_size
    comm = s.params["cp_comm"]
    if comm == "a2a+p2p" and c % a:
        out.append(("params.cp_a2a_size", f"a2a+p2p: all-to-all groups of {a} ranks do not divide "
                                          f"the {c} ranks"))
    elif comm in ("a2a", "a2a+p2p") and (s.heads % a or s.kv_heads % a):
        out.append(("params.cp_comm", f"{comm} scatters heads over {a} ranks: heads ({s.heads}) and "
                                      f"kv_heads ({s.kv_heads}) must be divisible by {a}"))
    return out
