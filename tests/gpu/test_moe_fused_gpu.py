"""GPU checks of our fused MoE expert kernel (gemm: fused): it matches the per-expert torch
reference at decode-like and prefill-like row counts, with uneven and empty experts, under
each launch option (tail blocks, attached rows, TMA loads), and a kernel given the
wrong expert's weights is caught."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from commbench.families.moe import fused_moe_triton as fused
from commbench.families.moe.expert_bench import reference
from commbench.families.moe.experts import LocalExperts
from commbench.families.moe.layer_ref import BF16_TOKEN_RTOL, token_errors
from commbench.families.moe.reference import make_tokens

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("triton") is None,
                                 reason="needs a CUDA GPU and Triton")]


def _setup(counts, hidden=1024, inter=384, cfg=fused.Config(16, 64, 128, 4, 4)):
    experts = LocalExperts(0, len(counts), hidden, inter, "cuda", "fused")
    experts.fused.only = (cfg,)   # one configuration: no tuning sweep in a test
    xe = make_tokens(0, sum(counts), hidden, "cuda")
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return experts, xe, ends


DECODE_ROWS = [3, 0, 20, 1, 17, 0, 0, 64]
# prefill-like: every tail size (1, 15, 16, 17, 33, 65, 100 rows past the full blocks), empty
# experts, whole blocks
PREFILL_ROWS = [130, 257, 0, 96, 200, 1, 128, 65, 0, 15, 16, 17, 33, 100, 159]


@pytest.mark.parametrize("counts,cfg", [
    (DECODE_ROWS, fused.Config(16, 64, 128, 4, 4)),
    (DECODE_ROWS, fused.Config(16, 128, 128, 4, 3, tma=True)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 3)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 3, tail_m=16)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 3, tail_m=32, tma=True)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 3, tail_m=16, tma=True)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 3, attach_m=32)),
    (PREFILL_ROWS, fused.Config(128, 64, 64, 8, 3, tail_m=32, attach_m=32, tma=True)),
    # gate and up as one product: gathered pairs, and the packed w13 (pointer and TMA loads)
    (DECODE_ROWS, fused.Config(16, 64, 128, 4, 4, pair=1)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 4, attach_m=32, pair=1)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 4, tail_m=32, tma=True, pair=2)),
    (PREFILL_ROWS, fused.Config(128, 128, 64, 8, 4, attach_m=32, tma=True, pair=2)),
    (PREFILL_ROWS, fused.Config(128, 64, 64, 8, 3, tail_m=16, pair=2)),
])
def test_fused_matches_the_reference(counts, cfg):
    experts, xe, ends = _setup(counts, cfg=cfg)
    assert experts.gemm == "fused"
    got = experts.forward(xe, ends)
    err = token_errors(got, reference(experts, xe, counts))
    assert float(err.max()) <= BF16_TOKEN_RTOL
    assert [t["config"] for t in experts.fused.tried] == [cfg.label()] * 2   # gate_up, down


@pytest.mark.parametrize("cfg", [fused.Config(128, 128, 64, 8, 3, pair=1),
                                 fused.Config(128, 128, 64, 8, 3, tail_m=32, pair=2),
                                 fused.Config(128, 128, 64, 8, 3, tail_m=32, tma=True, pair=2)])
def test_paired_gate_up_with_a_partial_column_tile(cfg):
    # 320 columns: the last 128-column tile is partly past N (its pairs masked, or read past
    # the expert's rows and never stored). This checks the split and the edge tile's results;
    # a mask left out would read out of bounds without changing them (compute-sanitizer's
    # memcheck would see it, this test would not)
    experts, xe, ends = _setup(PREFILL_ROWS, inter=320, cfg=cfg)
    err = token_errors(experts.forward(xe, ends), reference(experts, xe, PREFILL_ROWS))
    assert float(err.max()) <= BF16_TOKEN_RTOL


@pytest.mark.parametrize("block_m,tail_m,attach_m", [(16, 16, 0), (128, 128, 0), (128, 16, 0),
                                                     (128, 32, 0), (64, 16, 0), (128, 128, 32),
                                                     (128, 32, 64)])
def test_device_block_map_is_the_reference(block_m, tail_m, attach_m):
    ends = torch.tensor(PREFILL_ROWS, device="cuda").cumsum(0).to(torch.int32)
    got = fused.block_map(ends, block_m, sum(PREFILL_ROWS), tail_m, attach_m)
    want = fused.block_map_reference(ends, block_m, sum(PREFILL_ROWS), tail_m, attach_m)
    for a, b in zip(got[:4], want[:4]):
        assert a.tolist() == b.tolist()
    assert got.count == want.count


def test_wrong_weights_are_caught():
    counts = [16, 16, 16, 16]
    experts, xe, ends = _setup(counts)
    want = reference(experts, xe, counts)
    experts.w2[1].copy_(experts.w2[2])   # expert 1 now computes with expert 2's down projection
    err = token_errors(experts.forward(xe, ends), want)
    assert int((err > BF16_TOKEN_RTOL).sum()) == 16
