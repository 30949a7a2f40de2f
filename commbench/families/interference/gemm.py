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
    """(A, B, C) on ``device``; C is the output buffer (zeroed). A repeats a 3 x 3 tile (its rows and
    columns mod 3) and B a 5 x 5 one, so each is gathered from its tile in the Case's dtype: no
    index the size of the matrix is built (int64, 16 bytes an element with its remainder)."""
    import torch

    td = torch_dtype(dtype)
    a = _gather(_a(torch.arange(3), torch.arange(3)), m, k, 3, td, device)
    b = _gather(_b(torch.arange(5), torch.arange(5)), k, n, 5, td, device)
    return a, b, torch.zeros(m, n, dtype=td, device=device)


def _gather(tile, rows: int, cols: int, period: int, td, device):
    """The [rows, cols] matrix whose (i, j) is tile[i % period, j % period]."""
    import torch

    t = tile.to(td).to(device)
    r = torch.arange(rows, device=device) % period
    c = torch.arange(cols, device=device) % period
    return t[r][:, c]


def run(a, b, c) -> None:
    import torch

    torch.matmul(a, b, out=c)


def count_wrong(c, k: int, dtype: str) -> int:
    """Wrong elements in CHECK_ROWS rows of C spread over the matrix, against a float64 reference on
    the CPU built from the patterns' period (15 = 3 x 5 in k): C[i, j] = sum over the residues r of
    k mod 15 of (how many k < K have that residue) x A[i, r] x B[r, j]. Host memory: 15 rows of B."""
    import torch

    m, n = c.shape
    rows = torch.linspace(0, m - 1, steps=min(CHECK_ROWS, m)).round().long().unique()
    res = torch.arange(15)
    per = torch.full((15,), k // 15, dtype=torch.float64) + (res < k % 15).double()
    want = (_a(rows, res).double() * per) @ _b(res, torch.arange(n)).double()
    got = c[rows.to(c.device)].double().cpu()
    bad = ~((got - want).abs() <= REL_TOL.get(dtype, 0.0) * want.abs())   # NaN counts as wrong
    return int(bad.sum())


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k
