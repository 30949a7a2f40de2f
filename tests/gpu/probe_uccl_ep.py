"""One rank through UCCL-EP's DeepEP-compatible wrapper (ep/deep_ep_wrapper/deep_ep, put on the path
as ``uccl_deep_ep`` by build_uccl_ep.sh): Buffer, layout, dispatch and combine of 64 BF16 tokens, the
combined rows checked against x. Prints ``uccl-ep probe: ok ...`` or UCCL-EP's own first error (what
a `uccl_ep` MoE row would be skipped with on this machine).

    PYTHONPATH=/tmp/uccl-ep/site:/tmp/uccl-ep python3 tests/gpu/probe_uccl_ep.py [normal|ll]
"""
from __future__ import annotations

import os
import sys
import tempfile
import traceback


def main(mode: str) -> int:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    store = tempfile.mktemp(prefix="uccl-probe-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    stage = "import"
    try:
        import uccl_deep_ep as dep

        tokens, hidden, experts, topk = 64, 2048, 8, 4
        g = torch.Generator(device="cpu").manual_seed(1)
        x = (torch.randn(tokens, hidden, generator=g) + 1).to("cuda", torch.bfloat16)
        idx = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(tokens)]).to("cuda")
        w = torch.rand(tokens, topk, generator=g).to("cuda")
        if mode == "normal":
            stage = "Buffer(normal)"
            buf = dep.Buffer(dist.group.WORLD, 256 << 20, 0)
            stage = "get_dispatch_layout"
            per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, experts)
            stage = "dispatch"
            out = buf.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
                               is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
            stage = "combine"
            y, _, _ = buf.combine(out[0], out[4])
            torch.cuda.synchronize()
            err = (y.float() - x.float()).abs().max().item()
        else:
            stage = "Buffer(low_latency)"
            hint = dep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, 1, experts)
            buf = dep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, num_qps_per_rank=experts)
            stage = "low_latency_dispatch"
            rx, count, handle, _, _ = buf.low_latency_dispatch(x, idx, tokens, experts, use_fp8=False)
            stage = "low_latency_combine"
            y, _, _ = buf.low_latency_combine(rx, idx, w, handle)
            torch.cuda.synchronize()
            err = (y.float() - x.float() * w.sum(1, keepdim=True)).abs().max().item()
        print(f"uccl-ep probe ({mode}): ok, 1 rank, {tokens} tokens x {hidden}, max |error| {err:.3g}")
        return 0 if err < 0.1 * x.float().abs().max().item() else 1
    except BaseException as exc:  # noqa: BLE001 - the point is to print UCCL-EP's own error
        print(f"uccl-ep probe ({mode}): {stage} failed: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 2
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "normal"))
