"""Compare builds of the copy family's SM kernel (kernels/copy.cu's compile-time choices) on GPU 0:
h2d (pinned, mapped), d2h and d2d at one size, each timed with CUDA events around back-to-back
copies, checked, and set against its bound (analysis/bound_copy.py on this machine's links). The
copy engine's numbers come first, for reference.

    python3 benchmarks/copy_sm_variants.py [--size-mib 1024] [--iters 10]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commbench import jit
from commbench.analysis.bound_copy import copy_bound
from commbench.families.copy import native
from commbench.families.copy.buffers import Direction, Pool
from commbench.sysinfo import links as link_probe

VARIANTS = {   # name -> nvcc flags (the defaults are in kernels/copy.cu)
    "default": [],                                      # tiled, plain loads
    "strided": ["-DCB_COPY_TILED=0"],
    "strided+l2": ["-DCB_COPY_TILED=0", "-DCB_COPY_L2_256=1"],
    "tiled+l2": ["-DCB_COPY_L2_256=1"],
    "unroll8x2": ["-DCB_COPY_UNROLL=8", "-DCB_COPY_CTAS_PER_SM=2"],
    "unroll2": ["-DCB_COPY_UNROLL=2"],
    "ctas2": ["-DCB_COPY_CTAS_PER_SM=2"],
}
OPS = {"h2d": ("pinned", "device"), "d2h": ("device", "pinned"), "d2d": ("device", "device")}


def _time_us(lib, op: native.CopyOp, stream, iters: int) -> float:
    import torch

    addr, handle = ctypes.addressof(op), stream.cuda_stream
    for _ in range(2):
        if lib.cb_copy_enqueue(addr, handle):
            raise RuntimeError("warm-up enqueue failed")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream.synchronize()
    start.record(stream)
    for _ in range(iters):
        if lib.cb_copy_enqueue(addr, handle):
            raise RuntimeError("enqueue failed")
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def _wrong(lib, op, direction: Direction, count: int, stream) -> int:
    import torch

    direction.dst.clear(count)
    torch.cuda.synchronize()
    op.next = 0
    lib.cb_copy_enqueue(ctypes.addressof(op), stream.cuda_stream)
    stream.synchronize()
    return direction.wrong(count)


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    size = args.size_mib << 20
    torch.cuda.set_device(0)
    with ThreadPoolExecutor(len(VARIANTS)) as pool:   # compile every build at once
        libs = dict(zip(VARIANTS, pool.map(lambda f: jit.load("copy", flags=f), VARIANTS.values())))
    for lib in libs.values():
        lib.cb_copy_enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    machine = link_probe.collect({})
    stream = torch.cuda.Stream(device=0)
    ctas = native.sm_ctas(0)
    print(f"size {args.size_mib} MiB, {args.iters} iterations, default grid {ctas} CTAs")
    print("variant\top\tGB/s\tbound\tpct\twrong")
    for op_name, (src_place, dst_place) in OPS.items():
        d = Direction(Pool.make(src_place, 0, size), Pool.make(dst_place, 0, size), 0)
        d.src.fill(0)
        torch.cuda.synchronize()
        limit, _ = copy_bound({"op": op_name, "gpu": 0}, machine)
        runs = [("ce", 0, libs["default"], ctas)] + [(name, 1, lib, ctas) for name, lib in libs.items()]
        for name, engine, lib, blocks in runs:
            per_sm = 2 if "x2" in name or name == "ctas2" else 4
            op = native.CopyOp(engine=engine, dst=d.dst.ptr, src=d.src.ptr, bytes=size, stride=size, slots=1,
                               next=0, dev=0, dev2=0, blocks=blocks * per_sm // 4, blocks2=0)
            us = _time_us(lib, op, stream, args.iters)
            gbps = size / us / 1e3
            pct = f"{gbps / limit.gbps * 100:.1f}" if limit else "n/a"
            print(f"{name}\t{op_name}\t{gbps:.1f}\t{limit.gbps if limit else 'n/a'}\t{pct}\t"
                  f"{_wrong(lib, op, d, size // 4, stream)}", flush=True)
        torch.cuda.synchronize()
        d.src.release()
        d.dst.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
