"""The mpi backend's buffers are numpy arrays (device buffers.NUMPY): the same layout, aliasing and
contents as the torch buffers, the same check, and a rank with host MPI Cases only never imports
torch (about a second of CPU per rank, the largest fixed cost of a CPU launch)."""
import subprocess
import sys

import numpy as np
import pytest

from commbench.comm import buffers
from commbench.comm.ops import OPS, no_in_place_reason
from commbench.families.base import Case
from commbench.families.collectives.family import FAMILY

N, COUNT = 3, 40
FORMS = [(op, ip) for op in OPS for ip in (False, True) if not (ip and no_in_place_reason(op))]


def _ranks(op, in_place, device=buffers.NUMPY, dtype="float32"):
    return [buffers.allocate(op, COUNT, N, r, dtype, device, in_place) for r in range(N)]


def _wrong(op, bufs, dtype="float32", reduce_op="sum"):
    return [buffers.count_wrong(op, reduce_op, b, N, r, dtype) for r, b in enumerate(bufs)]


@pytest.mark.parametrize("op,in_place", FORMS)
def test_numpy_buffers_match_the_torch_layout_and_contents(op, in_place):
    torch = pytest.importorskip("torch")
    for r, (h, t) in enumerate(zip(_ranks(op, in_place), _ranks(op, in_place, "cpu"))):
        assert isinstance(h.send, np.ndarray) and isinstance(t.send, torch.Tensor)
        for name in ("send", "recv", "result"):
            assert np.array_equal(getattr(h, name), getattr(t, name).numpy()), (op, in_place, r, name)
        same_storage = t.send.untyped_storage().data_ptr() == t.recv.untyped_storage().data_ptr()
        assert np.shares_memory(h.send, h.recv) == same_storage   # in-place aliasing kept


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("reduce_op", ["sum", "max"])
def test_all_reduce_moved_by_hand_checks_clean_and_one_element_off_counts(dtype, reduce_op):
    bufs = _ranks("all_reduce", False, dtype=dtype)
    fold = np.sum if reduce_op == "sum" else np.max
    total = fold(np.stack([b.send for b in bufs]), axis=0)
    assert _wrong("all_reduce", bufs, dtype, reduce_op) == [COUNT] * N   # zeros before the op
    for b in bufs:
        b.recv[:] = total
    assert _wrong("all_reduce", bufs, dtype, reduce_op) == [0] * N
    bufs[1].recv[7] += 1
    assert _wrong("all_reduce", bufs, dtype, reduce_op) == [0, 1, 0]


def test_alltoall_and_refill():
    bufs = _ranks("alltoall", False)
    for r, b in enumerate(bufs):   # rank r's chunk j goes to rank j's chunk r
        for j, peer in enumerate(bufs):
            peer.recv[r * COUNT:(r + 1) * COUNT] = b.send[j * COUNT:(j + 1) * COUNT]
    assert _wrong("alltoall", bufs) == [0] * N
    buffers.refill("alltoall", bufs[0], 0, False)   # the check's refill zeroes the output
    assert not bufs[0].recv.any() and _wrong("alltoall", bufs)[0] == N * COUNT


def test_nan_counts_wrong():
    bufs = _ranks("broadcast", False)
    for b in bufs:
        b.recv[:] = bufs[0].send
    bufs[2].recv[0] = np.nan
    assert _wrong("broadcast", bufs) == [0, 0, 1]


def test_only_gpu_backends_bind_a_gpu():
    def case(backend):
        return Case(suite="s", bench="b", family="collectives", op="all_reduce", backend=backend,
                    variant="default", env=(), dtype="float32", size_bytes=1024, params=(), warmup=1,
                    iters=1, timing="auto", ranks=2, ranks_per_node=1, timeout_s=60.0)

    assert [FAMILY.needs_gpu_for(case(b)) for b in ("mpi", "gloo", "nccl", "torch_nccl")] == [
        False, False, True, True]


def test_host_mpi_buffers_never_import_torch():
    code = ("import sys\nfrom commbench.comm import buffers, mpi_data\n"
            "from commbench.families.collectives.family import FAMILY\n"
            "b = buffers.allocate('all_gather', 8, 2, 1, 'float32', buffers.NUMPY, True)\n"
            "assert buffers.count_wrong('all_gather', 'sum', b, 2, 1, 'float32') > 0\n"
            "assert mpi_data._host(b.send) is b.send\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
