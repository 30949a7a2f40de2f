"""Native timed loops (kernels/timed_loop.cu, kernels/nccl_enqueue.cu): sources compile for sm_90,
the ctypes mirror of the op struct matches the C layout, and the nccl backend defaults to them.
The nccl op table itself: tests/unit/test_nccl_op_table.py."""
import ctypes
import shutil

import pytest

from commbench.comm import nccl_enqueue
from commbench.families.collectives.family import FAMILY

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not __import__("pathlib").Path(
    "/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed: CUDA sources cannot be compiled here")


@needs_nvcc
@pytest.mark.parametrize("name", ["timed_loop", "nccl_enqueue"])
def test_sources_compile_for_sm90(name):
    from commbench import jit

    jit.compile_check(name, arch="sm_90")


def test_op_struct_layout_matches_the_c_struct():
    # struct cb_nccl_op: 2 pointers, int, 2 pointers, 2 size_t, 5 ints, pointer, 3 size_t, 4 pointers
    # (x86-64: 144 bytes)
    assert ctypes.sizeof(nccl_enqueue._Op) == 144
    assert nccl_enqueue._Op.kind.offset == 16 and nccl_enqueue._Op.comm.offset == 80
    assert nccl_enqueue._Op.shift_bytes.offset == 88 and nccl_enqueue._Op.calls.offset == 104
    assert ctypes.sizeof(nccl_enqueue._P2p) == 4 * ctypes.sizeof(ctypes.c_void_p)


@needs_nvcc
def test_op_struct_size_is_the_c_size(tmp_path, monkeypatch):
    from commbench import jit

    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path))
    lib = ctypes.CDLL(str(jit.build("nccl_enqueue", arch="sm_90")))
    lib.cb_nccl_op_bytes.restype = ctypes.c_size_t
    assert lib.cb_nccl_op_bytes() == ctypes.sizeof(nccl_enqueue._Op)


def test_nccl_backend_defaults_to_the_native_loop():
    param = FAMILY.params["timed_loop"]
    assert param.default == "native" and set(param.choices) == {"native", "python"}


def test_allreduce_op_struct_layout_matches_the_c_struct():
    from commbench.families.allreduce import cb_backend

    # struct cb_allreduce_op: 2 ints, 4 pointers, 2 ints, size_t, 2 ints (x86-64: 64 bytes)
    assert ctypes.sizeof(cb_backend._Op) == 64
    assert cb_backend._Op.num_vecs.offset == 48


def test_nvshmem_op_struct_layout_and_kinds():
    from commbench.families.nvshmem import native

    # struct cb_shmem_op: 2 ints, 2 pointers, size_t, 6 ints, uint64, pointer (x86-64: 72 bytes)
    assert ctypes.sizeof(native._Op) == 72
    assert native._Op.values_host.offset == 64
    from commbench.families.nvshmem.ops import OPS

    assert native.kind(OPS["put"], "host", True) == "host_rma"
    assert native.kind(OPS["p"], "device", True) == "p"
    assert native.kind(OPS["put"], "device", False) == "none"
    assert native.kind(OPS["put_signal"], "host", True) is None  # its expected value grows per launch
    assert native.kind(OPS["pingpong"], "device", True) is None  # timed in the kernel


@needs_nvcc
def test_enqueue_rotates_buffers_as_nccl_tests(tmp_path, monkeypatch):
    """Call k passes send/recv shifted by shift_bytes * (k % steps); steps 1 never shifts. The C
    enqueue is driven with stand-in NCCL entry points that record the pointers they get."""
    from commbench import jit

    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path))
    lib = ctypes.CDLL(str(jit.build("nccl_enqueue", arch="sm_90")))
    lib.cb_nccl_enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    @proto
    def fake_all_reduce(send, recv, count, dtype, redop, comm, stream):
        seen.append((send, recv, count))
        return 0

    kind = nccl_enqueue.native_op_names(lib).index("all_reduce")
    send, recv, shift = 1 << 20, 1 << 30, 4096
    spec = nccl_enqueue._Op(ctypes.pointer(nccl_enqueue._P2p()), ctypes.cast(fake_all_reduce, ctypes.c_void_p).value,
                           kind, send, recv, 1024, 4, 7, 0, 0, 0, 1, None, shift, 3, 0)
    for _ in range(7):
        assert lib.cb_nccl_enqueue(ctypes.addressof(spec), None) == 0
    assert [(s - send, r - recv) for s, r, _ in seen] == [(shift * (k % 3),) * 2 for k in range(7)]
    assert {c for _, _, c in seen} == {1024} and spec.calls == 7 and spec.send == send
    seen.clear()
    spec.steps, spec.calls = 1, 0
    lib.cb_nccl_enqueue(ctypes.addressof(spec), None)
    lib.cb_nccl_enqueue(ctypes.addressof(spec), None)
    assert seen == [(send, recv, 1024)] * 2


@pytest.mark.parametrize("op,in_place", [("all_reduce", False), ("all_reduce", True), ("all_gather", False),
                                         ("all_gather", True), ("reduce_scatter", True), ("alltoall", False)])
def test_rotation_pool_slices_hold_the_same_input(op, in_place):
    torch = pytest.importorskip("torch")
    from commbench.comm import buffers

    n, rank, count = 4, 1, 64
    plain = buffers.allocate(op, count, n, rank, "float32", "cpu", in_place)
    largest = 4 * count * (1 if op == "all_reduce" else n)  # nccl-tests' max(sendBytes, expectedBytes)
    rot = buffers.allocate(op, count, n, rank, "float32", "cpu", in_place, span_bytes=10 * largest + 5)
    assert plain.steps == 1 and rot.steps == 10 and rot.shift_bytes == largest
    assert torch.equal(rot.send, plain.send) and torch.equal(rot.recv, plain.recv)
    elems = rot.shift_bytes // 4
    for k in range(1, rot.steps):  # the k-th slice of each pool is the head slice, bit for bit
        for head in (rot.send, rot.recv):
            base = head.untyped_storage().data_ptr()
            pool = torch.empty(0).set_(head.untyped_storage(), 0, (rot.steps * elems,))
            off = (head.data_ptr() - base) // 4
            assert torch.equal(pool[k * elems + off: k * elems + off + head.numel()], head)
    # a span smaller than the buffers: no rotation, no extra memory
    small = buffers.allocate(op, count, n, rank, "float32", "cpu", in_place, span_bytes=16)
    assert small.steps == 1 and small.send.untyped_storage().nbytes() <= 4 * count * n


@needs_nvcc
def test_launcher_calls_reach_c_with_their_arguments(tmp_path, monkeypatch):
    """cb_calls_enqueue calls each launcher in order with its integer/pointer arguments and the
    stream last, and stops at the first non-zero return (stand-in launchers record what they get)."""
    from commbench import jit
    from commbench.measure import native_loop

    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path))
    native_loop._lib.cache_clear()
    lib = ctypes.CDLL(str(jit.build("timed_loop", arch="sm_90")))
    monkeypatch.setattr(native_loop, "_lib", lambda: lib)
    lib.cb_calls_enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cb_cuda_error_string.restype = ctypes.c_char_p
    seen = []
    # a launcher like moe_normal_dispatch: 14 arguments (pointers, ints) and the stream
    wide = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] * 12), ctypes.c_int, ctypes.c_void_p,
                            ctypes.c_void_p)

    @wide
    def dispatch(*args):
        seen.append(("dispatch", args))
        return 0

    narrow = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)

    @narrow
    def failing(code, stream):
        seen.append(("failing", (code, stream)))
        return code

    dims = (ctypes.c_int * 10)(*range(10))
    ptrs = [ctypes.c_void_p(0x1000 * (i + 1)) for i in range(11)]
    op = native_loop.launcher_op([(dispatch, (dims, *ptrs, ctypes.c_int(-3), ctypes.c_void_p(0xbeef))),
                                  (failing, (ctypes.c_int(7),)), (dispatch, (dims, *ptrs, 0, None))])
    assert lib.cb_calls_enqueue(op.arg, ctypes.c_void_p(0x5a5a)) == 7
    assert [name for name, _ in seen] == ["dispatch", "failing"]  # the third call never ran
    args = seen[0][1]
    assert args[0] == ctypes.addressof(dims) and list(args[1:12]) == [p.value for p in ptrs]
    assert args[12] == -3 and args[13] == 0xbeef and args[14] == 0x5a5a
    assert seen[1][1] == (7, 0x5a5a)
    assert "CUDA error 7" in op.describe(7)
    with pytest.raises(TypeError):
        native_loop.launcher_op([(failing, (ctypes.c_float(1.0),))])
    with pytest.raises(ValueError):
        native_loop.launcher_op([(failing, (0,))] * 5)
