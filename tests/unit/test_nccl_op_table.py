"""One op table: ops.OPS and kernels/nccl_enqueue.cu list the same ops, each op reaches its NCCL
call through the native entry (driven with stand-in NCCL entry points), and an op newer than the
loaded NCCL is skipped with the reason."""
import ctypes

import pytest

from commbench import nccl_lib
from commbench.comm import nccl_enqueue
from commbench.comm.ops import OPS, ROOT
from tests.conftest import needs_nvcc

# How kernels/nccl_enqueue.cu must call each op's entry point (the NCCL signature after
# send, recv, count, datatype); None: grouped ncclSend/ncclRecv without a call of its own.
SHAPES = {"all_reduce": "reducing", "all_gather": "plain", "reduce_scatter": "reducing", "alltoall": "plain",
          "broadcast": "rooted", "reduce": "reduce", "sendrecv": None, "gather": "rooted", "scatter": "rooted",
          "alltoallv": None}
vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
PROTOS = {"plain": ctypes.CFUNCTYPE(i, vp, vp, sz, i, vp, vp),
          "reducing": ctypes.CFUNCTYPE(i, vp, vp, sz, i, i, vp, vp),
          "rooted": ctypes.CFUNCTYPE(i, vp, vp, sz, i, i, vp, vp),
          "reduce": ctypes.CFUNCTYPE(i, vp, vp, sz, i, i, i, vp, vp)}
SEND, RECV, COUNT, ELEM, DTYPE, REDOP, COMM, STREAM = 1 << 20, 1 << 30, 256, 4, 7, 2, 0xC0, 0x5A


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """kernels/nccl_enqueue.cu compiled for sm_90 (loads without a GPU: it calls no CUDA itself)."""
    from commbench import jit

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMMBENCH_JIT_CACHE", str(tmp_path_factory.mktemp("jit")))
        lib = ctypes.CDLL(str(jit.build("nccl_enqueue", arch="sm_90")))
    lib.cb_nccl_enqueue.argtypes = [vp, vp]
    return lib


def test_every_op_has_its_expected_nccl_shape_here():
    assert set(SHAPES) == set(OPS)  # a new op needs its line here too
    for op, shape in SHAPES.items():
        assert (shape is None) == (OPS[op].nccl_call == ""), op
        assert (shape in ("rooted", "reduce")) == OPS[op].rooted, op


@needs_nvcc
def test_cpp_table_lists_exactly_the_ops_of_ops_py(lib):
    names = nccl_enqueue.native_op_names(lib)
    assert nccl_enqueue.table_mismatch(names) is None, nccl_enqueue.table_mismatch(names)
    assert sorted(names) == sorted(OPS)


def test_a_row_on_one_side_only_is_named():
    py_only = nccl_enqueue.table_mismatch([op for op in OPS if op != "scatter"])
    assert py_only == "in ops.OPS but not in kernels/nccl_enqueue.cu: scatter"
    c_only = nccl_enqueue.table_mismatch([*OPS, "gatherv"])
    assert c_only == "in kernels/nccl_enqueue.cu but not in ops.OPS: gatherv"
    assert "twice in kernels/nccl_enqueue.cu: gather" in nccl_enqueue.table_mismatch([*OPS, "gather"])


@needs_nvcc
def test_loading_with_a_python_only_row_fails_loudly(lib, monkeypatch):
    from commbench import jit

    monkeypatch.setattr(jit, "load", lambda name: lib)
    monkeypatch.setitem(OPS, "gatherv", OPS["gather"])
    nccl_enqueue._library.cache_clear()
    try:
        with pytest.raises(nccl_enqueue.OpTableMismatch,
                           match="in ops.OPS but not in kernels/nccl_enqueue.cu: gatherv"):
            nccl_enqueue._library()
    finally:
        nccl_enqueue._library.cache_clear()


class _Recorder:
    """Stand-in NCCL: each entry point records its arguments and returns 0."""

    def __init__(self):
        self.calls = []
        self.fns = {shape: proto(lambda *a, shape=shape: self._log(shape, a)) for shape, proto in PROTOS.items()}
        self.send = ctypes.CFUNCTYPE(i, vp, sz, i, i, vp, vp)(lambda *a: self._log("send", a))
        self.recv = ctypes.CFUNCTYPE(i, vp, sz, i, i, vp, vp)(lambda *a: self._log("recv", a))
        self.start = ctypes.CFUNCTYPE(i)(lambda: self._log("group_start", ()))
        self.end = ctypes.CFUNCTYPE(i)(lambda: self._log("group_end", ()))
        addr = lambda f: ctypes.cast(f, vp).value  # noqa: E731
        self.p2p = nccl_enqueue._P2p(addr(self.send), addr(self.recv), addr(self.start), addr(self.end))

    def _log(self, name, args):
        self.calls.append((name, tuple(args)))
        return 0

    def address(self, shape):
        return ctypes.cast(self.fns[shape], vp).value if shape else None


def _spec(lib, rec, op, call, rank=1, nranks=3):
    kind = nccl_enqueue.native_op_names(lib).index(op)
    return nccl_enqueue._Op(ctypes.pointer(rec.p2p), call, kind, SEND, RECV, COUNT, ELEM, DTYPE, REDOP, ROOT, rank,
                           nranks, COMM, 0, 1, 0)


@needs_nvcc
@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_reaches_its_nccl_call_with_its_arguments(lib, op):
    rec = _Recorder()
    shape = SHAPES[op]
    spec = _spec(lib, rec, op, rec.address(shape))
    if op == "alltoallv":   # without its traffic matrix's counts it refuses (ncclInvalidArgument)
        assert lib.cb_nccl_enqueue(ctypes.addressof(spec), STREAM) == 4 and rec.calls == []
        return
    assert lib.cb_nccl_enqueue(ctypes.addressof(spec), STREAM) == 0
    if shape is None:   # sendrecv: rank 1 of 3 sends to 2 and receives from 0
        assert rec.calls == [("group_start", ()), ("send", (SEND, COUNT, DTYPE, 2, COMM, STREAM)),
                             ("recv", (RECV, COUNT, DTYPE, 0, COMM, STREAM)), ("group_end", ())]
        return
    middle = {"plain": (), "reducing": (REDOP,), "rooted": (ROOT,), "reduce": (REDOP, ROOT)}[shape]
    assert rec.calls == [(shape, (SEND, RECV, COUNT, DTYPE, *middle, COMM, STREAM))]


@needs_nvcc
def test_alltoall_without_ncclalltoall_is_grouped_send_recv(lib):
    rec = _Recorder()
    spec = _spec(lib, rec, "alltoall", None)
    assert lib.cb_nccl_enqueue(ctypes.addressof(spec), STREAM) == 0
    chunk = COUNT * ELEM
    p2p = [c for c in rec.calls if c[0] in ("send", "recv")]
    assert rec.calls[0][0] == "group_start" and rec.calls[-1][0] == "group_end"
    assert p2p == [item for peer in range(3) for item in (
        ("send", (SEND + peer * chunk, COUNT, DTYPE, peer, COMM, STREAM)),
        ("recv", (RECV + peer * chunk, COUNT, DTYPE, peer, COMM, STREAM)))]


@needs_nvcc
@pytest.mark.parametrize("op", ["gather", "scatter", "all_reduce"])
def test_an_op_without_its_entry_point_is_an_nccl_error_not_a_crash(lib, op):
    rec = _Recorder()
    spec = _spec(lib, rec, op, None)
    assert lib.cb_nccl_enqueue(ctypes.addressof(spec), STREAM) == 4   # ncclInvalidArgument
    assert rec.calls == []


def _fake_nccl(monkeypatch, version, exported):
    monkeypatch.setattr(nccl_lib, "version", lambda: version)
    monkeypatch.setattr(nccl_lib, "entry_point", lambda name: 0x1000 if name in exported else None)


def test_gather_and_scatter_are_skipped_before_nccl_2_28(monkeypatch):
    classic = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce"}
    _fake_nccl(monkeypatch, 22703, classic)
    for op, call in (("gather", "ncclGather"), ("scatter", "ncclScatter")):
        assert nccl_enqueue.unavailable(op) == f"{op} needs {call} (NCCL >= 2.28.0); this libnccl is 2.27.3"
    for op in ("all_reduce", "alltoall", "sendrecv", "broadcast"):
        assert nccl_enqueue.unavailable(op) is None
    assert nccl_enqueue.call_name("alltoall") == "grouped ncclSend/ncclRecv"
    assert nccl_enqueue.entry_point("all_reduce") == 0x1000


def test_nccl_2_28_runs_gather_scatter_and_one_call_alltoall(monkeypatch):
    _fake_nccl(monkeypatch, 22809, {"ncclGather", "ncclScatter", "ncclAlltoAll"})
    assert nccl_enqueue.unavailable("gather") is None and nccl_enqueue.unavailable("scatter") is None
    assert nccl_enqueue.call_name("alltoall") == "ncclAlltoAll"
    _fake_nccl(monkeypatch, 22809, set())   # a 2.28 build without the symbol: still skipped
    assert "needs ncclGather" in nccl_enqueue.unavailable("gather")


@needs_nvcc
def test_alltoallv_sends_each_peer_its_block_and_skips_empty_ones(lib):
    """Rank 1 of 3 sends 3 elements to rank 0, none to itself, 5 to rank 2, and receives 2 from
    rank 0 and 4 from itself: one send/recv per non-empty block, at its displacement."""
    rec = _Recorder()
    spec = _spec(lib, rec, "alltoallv", None)
    arrays = [(ctypes.c_size_t * 3)(*v) for v in ([3, 0, 5], [0, 3, 3], [2, 4, 0], [0, 2, 6])]
    (spec.send_counts, spec.send_displs, spec.recv_counts,
     spec.recv_displs) = (ctypes.cast(a, ctypes.POINTER(ctypes.c_size_t)) for a in arrays)
    assert lib.cb_nccl_enqueue(ctypes.addressof(spec), STREAM) == 0
    assert rec.calls == [("group_start", ()),
                         ("send", (SEND, 3, DTYPE, 0, COMM, STREAM)),
                         ("recv", (RECV, 2, DTYPE, 0, COMM, STREAM)),
                         ("recv", (RECV + 2 * ELEM, 4, DTYPE, 1, COMM, STREAM)),
                         ("send", (SEND + 3 * ELEM, 5, DTYPE, 2, COMM, STREAM)),
                         ("group_end", ())]
