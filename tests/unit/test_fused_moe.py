"""The fused MoE expert kernel's block map, configuration choice and roofline on the CPU; the
Triton kernel itself through Triton's interpreter when Triton is installed (else skipped)."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from commbench.families.moe import fused_moe_blocks as blocks
from commbench.families.moe import fused_moe_triton as fused
from commbench.families.moe.expert_roofline import expert_roofline, tensor_tflops
from commbench.families.moe.experts import GEMM_PATHS
from commbench.families.moe.layer_plan import GEMMS

HAS_TRITON = importlib.util.find_spec("triton") is not None


def test_block_map_cuts_each_expert_into_its_own_blocks():
    counts = [3, 0, 20, 1, 17]
    ends = torch.tensor(counts).cumsum(0).to(torch.int32)
    b = fused.block_map_reference(ends, 16, sum(counts))
    # 3 -> 1 block, 0 -> none, 20 -> 2, 1 -> 1, 17 -> 2: 6 blocks, then spares mapped past the last
    assert b.end.tolist() == [1, 1, 3, 4, 6]
    assert b.count == -(-41 // 16) + 5
    assert b.expert.tolist() == [0, 2, 2, 3, 4, 4, 5, 5]
    assert b.row0.tolist()[:6] == [0, 0, 16, 0, 0, 16]
    assert b.rows.tolist() == [16] * 6 + [0, 0]


def test_tail_blocks_pad_fewer_than_tail_rows():
    # 300 rows, 128-row blocks, tails down to 16: 128 + 128 + 32 + 16 (pads 4, not 84)
    assert blocks.expert_blocks(300, 128, 16) == [(0, 128), (128, 128), (256, 32), (288, 16)]
    assert blocks.expert_blocks(300, 128, 128) == [(0, 128), (128, 128), (256, 128)]
    assert blocks.expert_blocks(100, 128, 32) == [(0, 128)]   # pads 28 < 32
    assert blocks.expert_blocks(100, 128, 16) == [(0, 64), (64, 32), (96, 16)]
    assert blocks.expert_blocks(0, 128, 16) == []
    for r in range(0, 400, 7):
        got = blocks.expert_blocks(r, 128, 16)
        covered = sum(n for _, n in got)
        assert r <= covered < r + 16
        assert [first for first, _ in got] == [sum(n for _, n in got[:i]) for i in range(len(got))]
        assert len(got) <= r // 128 + 1 + len(blocks.tail_sizes(128, 16))
    counts = [300, 0, 5, 128]
    ends = torch.tensor(counts).cumsum(0).to(torch.int32)
    b = fused.block_map_reference(ends, 128, sum(counts), 16)
    assert b.end.tolist() == [4, 4, 5, 6]
    assert b.rows.tolist()[:6] == [128, 128, 32, 16, 16, 128]
    assert b.count == blocks.max_blocks(sum(counts), 4, 128, 16) >= 6


def test_configurations_follow_rows_per_expert():
    assert fused.candidates(1024, 256) == fused.DECODE_CONFIGS
    assert fused.candidates(256 * 30, 256) == fused.MID_CONFIGS
    assert fused.candidates(32768, 128) == fused.PREFILL_UP_CONFIGS
    assert fused.candidates(32768, 128, swiglu=False) == fused.PREFILL_DOWN_CONFIGS
    # gate/up keeps two accumulators (gate and up): at most 128 columns with 128-row blocks
    assert all(c.block_n * c.block_m <= 128 * 128 for c in fused.PREFILL_UP_CONFIGS)
    assert all(c.block_m >= 16 and c.block_n >= 16 and c.block_k >= 16
               for c in fused.DECODE_CONFIGS + fused.MID_CONFIGS + fused.PREFILL_CONFIGS)


def test_fused_is_a_gemm_path_of_the_layer():
    assert "fused" in GEMMS and "fused" in GEMM_PATHS


def test_roofline_counts_touched_experts_and_takes_the_larger_time():
    # decode-like: 2 of 3 experts get rows; weights dominate
    b = expert_roofline([4, 0, 4], hidden=1024, inter=512, hbm_gbps=4800, peak_tflops=989)
    weights = 2 * 3 * 1024 * 512 * 2
    assert b.bytes == weights + 2 * 8 * 1024 * 2
    assert b.flops == 6.0 * 1024 * 512 * 8
    assert b.bound == "hbm" and b.roofline_us == pytest.approx(b.bytes / 4.8e6)
    # many rows per expert: the tensor cores bound it
    c = expert_roofline([4096], hidden=4096, inter=1536, hbm_gbps=4800, peak_tflops=989)
    assert c.bound == "compute" and c.roofline_us == pytest.approx(c.flops / 989e6)
    assert c.pct_of(2 * c.roofline_us) == pytest.approx(50.0)


def test_tensor_core_peaks_by_model():
    assert tensor_tflops("NVIDIA H200") == 989.0
    assert tensor_tflops("NVIDIA H200", "float8_e4m3") == 1979.0
    assert tensor_tflops("NVIDIA GH200 480GB") is None
    assert tensor_tflops("NVIDIA H100 PCIe") == 756.0


def test_available_says_why_not_here():
    why = fused.available()
    if not HAS_TRITON:
        assert "Triton" in why
    elif not torch.cuda.is_available():
        assert "CUDA" in why


INTERPRETED = """
import torch
import triton.runtime.interpreter as interp
if hasattr(interp, "_patch_lang_tensor"):
    # Triton 3.6's interpreter turns a scalar into int with int(array of one element), which
    # numpy >= 2.4 refuses: read the element instead
    _patch = interp._patch_lang_tensor
    def _patch_index(tensor, scope):
        _patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interp._patch_lang_tensor = _patch_index
_empty = torch.empty
def _nan_empty(*args, **kwargs):   # a row the kernel never writes must not pass for a result
    out = _empty(*args, **kwargs)
    return out.fill_(float("nan")) if out.dtype.is_floating_point else out
torch.empty = _nan_empty
from commbench.families.moe import fused_moe_triton as fused
from commbench.families.moe.experts import expert_forward, expert_weights
from commbench.families.moe.layer_ref import token_errors

H, I, counts = 64, 48, [3, 0, 20, 1, 17]   # 20 and 17 rows: 16 + attached rows at BM16-a16
w = [expert_weights(e, H, I) for e in range(len(counts))]
w13 = torch.stack([a for a, _ in w])
w2 = torch.stack([b for _, b in w])
g = torch.Generator().manual_seed(0)
x = (torch.randn(sum(counts), H, generator=g) * 9).to(torch.bfloat16)
ends = torch.tensor(counts).cumsum(0).to(torch.int32)
want = torch.empty_like(x)
start = 0
for e, n in enumerate(counts):
    if n:
        want[start:start + n] = expert_forward(x[start:start + n], w13[e], w2[e])
    start += n
for bm, tail, attach in ((16, 16, 0), (32, 32, 0), (64, 16, 0), (16, 16, 16)):
    ref = fused.block_map_reference(ends, bm, sum(counts), tail, attach)
    got = fused.block_map(ends, bm, sum(counts), tail, attach)
    assert all(a.tolist() == b.tolist() for a, b in zip(got[:4], ref[:4])), (got, ref)
    assert got.count == ref.count
for cfg in (fused.Config(16, 16, 32, 4, 2), fused.Config(32, 32, 16, 4, 2, tail_m=16, attach_m=16),
            fused.Config(64, 32, 32, 4, 2, tail_m=16), fused.Config(64, 16, 32, 4, 2, tail_m=16, tma=True),
            fused.Config(16, 16, 32, 4, 2, attach_m=16), fused.Config(16, 16, 32, 4, 2, pair=1),
            fused.Config(32, 16, 16, 4, 2, tail_m=16, attach_m=16, pair=1),
            fused.Config(32, 16, 32, 4, 2, tail_m=16, attach_m=16, pair=2),
            fused.Config(64, 16, 32, 4, 2, tail_m=16, tma=True, pair=2),
            # 32 columns over I = 48: the second column tile is half past N (masks used)
            fused.Config(16, 32, 32, 4, 2, pair=1),
            fused.Config(32, 32, 32, 4, 2, tail_m=16, attach_m=16, tma=True, pair=2)):
    w = fused.pack_pairs(w13) if cfg.pair == 2 else w13
    h = fused.moe_gemm(x.half(), w.half(), ends, True, cfg)
    got = fused.moe_gemm(h.half(), w2.half(), ends, False, cfg)
    print(cfg.label(), float(token_errors(got, want).max()))
"""


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed here (the GPU machine has it)")
def test_kernel_matches_the_reference_in_the_interpreter():
    # Triton's CPU interpreter (a fresh process: it must be on before Triton is imported) has no
    # bfloat16 arithmetic: run the kernel in FP16 (weights and inputs are exact in both) and
    # compare with the BF16 torch reference
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [float(line.split()[1]) for line in done.stdout.splitlines()]
    assert len(errors) == 11 and max(errors) < 3e-2, done.stdout


def test_layer_columns_sum_the_micro_batches(monkeypatch):
    from commbench.families.moe import expert_roofline as er
    from commbench.families.moe import routing

    routed = routing.generate("random", num_ranks=2, num_tokens=8, num_experts=4, topk=2, seed=0)
    assert er.layer_columns([routed], 0, 64, 32, "cpu", 10.0) == {}   # no datasheet on a CPU
    monkeypatch.setattr(er, "device_limits", lambda device: (4800.0, 989.0, "test"))
    one = er.layer_columns([routed], 0, 64, 32, "cuda", 10.0)
    two = er.layer_columns([routed, routed], 0, 64, 32, "cuda", 10.0)
    counts = routed.tokens_per_expert()[:2].tolist()
    assert one["expert_roofline_us"] == pytest.approx(
        expert_roofline(counts, 64, 32, 4800.0, 989.0).roofline_us)
    assert two["expert_roofline_us"] == pytest.approx(2 * one["expert_roofline_us"])
    assert two["pct_of_roofline"] == pytest.approx(100 * two["expert_roofline_us"] / 10.0)


def test_config_labels_name_every_launch_option():
    assert fused.Config(128, 128, 64, 8, 3).label() == "BM128-BN128-BK64-w8-s3"
    cfg = fused.Config(128, 64, 64, 8, 3, tail_m=32, attach_m=32, tma=True)
    assert cfg.label() == "BM128-BN64-BK64-w8-s3-t32-a32-tma"
    assert cfg.tail == 32 and fused.Config(16, 64, 128, 4, 4).tail == 16


def test_paired_layout_interleaves_gate_and_up_rows():
    L, N, K = 2, 3, 4
    w13 = torch.arange(L * 2 * N * K, dtype=torch.float32).view(L, 2 * N, K)
    packed = fused.pack_pairs(w13)
    assert packed.shape == w13.shape and packed.is_contiguous()
    for e in range(L):
        for j in range(N):
            assert torch.equal(packed[e, 2 * j], w13[e, j])          # gate j
            assert torch.equal(packed[e, 2 * j + 1], w13[e, N + j])  # up j
    assert fused.Config(128, 128, 64, 8, 4, tail_m=32, pair=2, tma=True).label() == \
        "BM128-BN128-BK64-w8-s4-t32-pp-tma"
    assert fused.Config(128, 128, 64, 8, 4, pair=1).label() == "BM128-BN128-BK64-w8-s4-pg"
    with pytest.raises(ValueError, match="pointer loads"):
        fused.Config(128, 128, 64, 8, 4, pair=1, tma=True)
    with pytest.raises(ValueError, match="pair must be"):
        fused.Config(128, 128, 64, 8, 4, pair=3)


def test_attached_rows_ride_on_the_last_full_block():
    # 140 rows, 128-row blocks, 32 attached: one program covers all 140 (one weight read)
    assert blocks.expert_blocks(140, 128, 128, 32) == [(0, 160)]
    assert blocks.expert_blocks(300, 128, 128, 64) == [(0, 128), (128, 192)]
    # too many leftover rows, or no full block: the tail rule applies
    assert blocks.expert_blocks(200, 128, 32, 32) == [(0, 128), (128, 64), (192, 32)]
    assert blocks.expert_blocks(20, 128, 32, 32) == [(0, 32)]
    counts = [140, 0, 20, 256]
    ends = torch.tensor(counts).cumsum(0).to(torch.int32)
    b = fused.block_map_reference(ends, 128, sum(counts), 32, 32)
    assert b.end.tolist() == [1, 1, 2, 4]
    assert b.rows.tolist()[:4] == [160, 32, 128, 128]
    assert b.row0.tolist()[:4] == [0, 0, 0, 128]
