"""gather and scatter as nccl-tests defines them, in one process: every rank's buffers (ops.OPS
layout, in-place aliasing), the data moved by hand as the collective would, then the check.
The same ops under mpiexec on MPI and gloo: tests/unit/test_cpu_runs.py."""
import pytest

from commbench.comm.ops import OPS, ROOT

torch = pytest.importorskip("torch")
from commbench.comm import buffers  # noqa: E402  (needs torch)

N, COUNT = 3, 40


def _ranks(op, in_place, dtype="float32"):
    return [buffers.allocate(op, COUNT, N, r, dtype, "cpu", in_place) for r in range(N)]


def _wrong(op, bufs, dtype="float32"):
    return [buffers.count_wrong(op, "sum", b, N, r, dtype) for r, b in enumerate(bufs)]


@pytest.mark.parametrize("in_place", [False, True])
def test_gather_root_holds_every_ranks_chunk_in_rank_order(in_place):
    bufs = _ranks("gather", in_place)
    assert bufs[ROOT].recv.numel() == N * COUNT and bufs[1].send.numel() == COUNT
    if in_place:   # nccl-tests: the send buffer is the rank's chunk of the receive buffer
        assert bufs[1].send.data_ptr() == bufs[1].recv.data_ptr() + 1 * COUNT * 4
    root = bufs[ROOT].recv
    for r, b in enumerate(bufs):
        root[r * COUNT:(r + 1) * COUNT].copy_(b.send)
    assert _wrong("gather", bufs) == [0] * N
    root[2 * COUNT + 5] += 1          # rank 2's chunk, one element off
    assert _wrong("gather", bufs) == [1, 0, 0]   # only the root's result is checked, as nccl-tests


def test_gather_without_the_data_moved_is_wrong():
    bufs = _ranks("gather", False)
    assert _wrong("gather", bufs)[ROOT] == N * COUNT   # zeros everywhere


@pytest.mark.parametrize("in_place", [False, True])
def test_scatter_gives_each_rank_its_chunk_of_the_roots_buffer(in_place):
    bufs = _ranks("scatter", in_place)
    assert bufs[ROOT].send.numel() == N * COUNT and bufs[1].recv.numel() == COUNT
    if in_place:   # nccl-tests: the receive buffer is the rank's chunk of the send buffer
        assert bufs[2].recv.data_ptr() == bufs[2].send.data_ptr() + 2 * COUNT * 4
    src = bufs[ROOT].send.clone()
    for r, b in enumerate(bufs):
        b.recv.copy_(src[r * COUNT:(r + 1) * COUNT])
    assert _wrong("scatter", bufs) == [0] * N
    bufs[1].recv[0] = 0
    assert _wrong("scatter", bufs) == [0, 1, 0]


def test_scatter_receiving_its_own_data_is_wrong():
    # a rank that kept its own input instead of the root's chunk (in place, rank 1 of 3)
    bufs = _ranks("scatter", True)
    assert _wrong("scatter", bufs)[1] > 0


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_table_rows_follow_nccl_tests(op):
    spec = OPS[op]
    assert spec.chunked and spec.rooted and not spec.reduces and not spec.torch_local_copy
    assert spec.bus_factor(4) == pytest.approx(0.75) and spec.bus_factor(1) == 0.0
    assert (spec.send_chunks, spec.recv_chunks) == ((False, True) if op == "gather" else (True, False))
    assert spec.nccl_call == {"gather": "ncclGather", "scatter": "ncclScatter"}[op]
    assert spec.nccl_since == 22800 and spec.nccl_fallback == ""
