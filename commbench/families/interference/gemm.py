"""The GEMM of an interference Case: verifiable inputs and an independent check.

A[i, k] = 1 where (i + 2k) mod 3 != 0, else 0; B[k, j] = 1 where (3k + j) mod 5 != 0, else 0.
Every entry of C = A B is a count (0 < C <= K, exact in float32 up to K = 2^24), with no
cancellation, so relative rounding is all a low-precision GEMM can add. The check recomputes
sampled rows in float64 on the CPU (not with the kernel under test). bf16/fp16 are allowed
their rounding, including split-K partial sums kept in the input type (torch's default).
"""
from __future__ import annotations

from ...comm.buffers import torch_dtype

CHECK_ROWS = 16
REL_TOL = {"float32": 0.0, "bfloat16": 2e-2, "float16": 4e-3}


def _a(rows, k):
    return ((rows[:, None] + 2 * k[None, :]) % 3 != 0)


def _b(k, cols):
    return ((3 * k[:, None] + cols[None, :]) % 5 != 0)


def make(m: int, n: int, k: int, dtype: str, device: str):
    """(A, B, C) on ``device``; C is the output buffer (zeroed)."""
    import torch

    td = torch_dtype(dtype)
    ks = torch.arange(k, device=device)
    a = _a(torch.arange(m, device=device), ks).to(td)
    b = _b(ks, torch.arange(n, device=device)).to(td)
    return a, b, torch.zeros(m, n, dtype=td, device=device)


def run(a, b, c) -> None:
    import torch

    torch.matmul(a, b, out=c)


def count_wrong(c, k: int, dtype: str) -> int:
    """Wrong elements in CHECK_ROWS rows of C spread over the matrix (float64 reference on the CPU)."""
    import torch

    m, n = c.shape
    rows = torch.linspace(0, m - 1, steps=min(CHECK_ROWS, m)).round().long().unique()
    ks = torch.arange(k)
    want = _a(rows, ks).double() @ _b(ks, torch.arange(n)).double()
    got = c[rows.to(c.device)].double().cpu()
    bad = ~((got - want).abs() <= REL_TOL.get(dtype, 0.0) * want.abs())   # NaN counts as wrong
    return int(bad.sum())


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k
