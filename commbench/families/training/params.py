"""The training family's suite parameters (one table: validation, `commbench list`, docs)."""
from __future__ import annotations

from ..base import Param
from .presets import PRESETS

CP_COMMS = ("p2p", "all_gather", "a2a", "a2a+p2p")
REDUCE_DTYPES = ("same", "float32", "bfloat16")
FAULTS = ("none", "stale")
# Bounds past every preset (llama3-405b: hidden 16384, ffn 53248, 128 heads, 126 layers): a typo
# (layers: 1000000000) is refused before a rank tries to allocate it; what fits a given GPU is
# found when the Case runs.
MAX_HIDDEN = 65536
MAX_FFN = 262144
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_TOKENS = 1 << 18      # tokens per rank per step: 64x the default 4096
MAX_SEQ_LEN = 1 << 24     # cp: the whole sequence over all ranks
MAX_LAYERS = 256
MAX_RANKS = 1 << 16       # replicate and cp_a2a_size divide the ranks

PARAMS: dict[str, Param] = {
    # shape
    "model": Param("llama3-8b", (str,), "model preset giving hidden, ffn, heads, kv_heads",
                   choices=tuple(PRESETS)),
    "hidden": Param(0, (int,), "hidden size (0: the preset's)", range=(0, MAX_HIDDEN)),
    "ffn": Param(0, (int,), "MLP inner size (0: the preset's)", range=(0, MAX_FFN)),
    "heads": Param(0, (int,), "attention heads (0: the preset's)", range=(0, MAX_HEADS)),
    "kv_heads": Param(0, (int,), "key/value heads, grouped-query attention (0: the preset's)",
                      range=(0, MAX_HEADS)),
    "head_dim": Param(0, (int,), "channels per head (0: hidden / heads)", range=(0, MAX_HEAD_DIM)),
    "tokens_per_rank": Param(4096, (int,), "tokens each rank computes per step (tp: tokens of the "
                             "TP group's micro-batch, every TP rank sees them)", range=(1, MAX_TOKENS)),
    "seq_len": Param(0, (int,), "sequence length (0: one sequence of tokens_per_rank tokens; "
                     "cp: the whole sequence, default tokens_per_rank x ranks)", range=(0, MAX_SEQ_LEN)),
    "layers": Param(2, (int,), "transformer layers in the measured step (a few represent the model)",
                    range=(1, MAX_LAYERS)),
    "seed": Param(0, (int,), "seed of parameters, inputs and output gradients", range=(0, 2**32 - 1)),
    # fsdp
    "reshard_after_forward": Param(True, (bool,), "fsdp: free gathered parameters after forward and "
                                   "all-gather them again before backward"),
    "prefetch": Param(True, (bool,), "fsdp: issue the next layer's all-gather before this layer computes"),
    "replicate": Param(1, (int,), "fsdp: HSDP replica groups (>1 adds an all-reduce of the gradient "
                       "shards across replicas)", range=(1, MAX_RANKS)),
    "reduce_dtype": Param("same", (str,), "fsdp/distopt: dtype of the gradient reduction "
                          "(same: the Case dtype)", choices=REDUCE_DTYPES),
    # distopt
    "bucket_params": Param(0, (int,), "distopt: parameters per gradient bucket "
                           "(0: max(40M, 1M x data-parallel ranks), as Megatron)", range=(0, None),
                           why_unbounded="a bucket never holds more than the step's weights: any larger "
                                         "value is one bucket"),
    "overlap_grad_reduce": Param(True, (bool,), "distopt: reduce-scatter each bucket as backward fills "
                                 "it (false: one bucket after backward)"),
    "overlap_param_gather": Param(True, (bool,), "distopt: all-gather updated parameters behind the "
                                  "next forward (false: before the step ends)"),
    # tp
    "sequence_parallel": Param(False, (bool,), "tp: all-gather and reduce-scatter over the sequence "
                               "instead of all-reduces"),
    # cp
    "cp_comm": Param("p2p", (str,), "cp: p2p (ring), all_gather, a2a (Ulysses), a2a+p2p (hierarchical)",
                     choices=CP_COMMS),
    "cp_a2a_size": Param(0, (int,), "cp a2a+p2p: ranks per all-to-all group (0: the ranks of a node "
                         "when the Case spans nodes, else half the ranks)", range=(0, MAX_RANKS)),
    # self-check
    "fault": Param("none", (str,), "self-check: `stale` makes the schedule compute with stale data "
                   "(the row must come back wrong)", choices=FAULTS),
}
