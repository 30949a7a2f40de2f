"""Native timed loops (kernels/timed_loop.cu, kernels/nccl_enqueue.cu): sources compile for sm_90,
the ctypes mirror of the op struct matches the C layout, and the nccl backend defaults to them."""
import ctypes
import shutil

import pytest

from commbench.families.collectives import nccl_native
from commbench.families.collectives import FAMILY

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not __import__("pathlib").Path(
    "/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed: CUDA sources cannot be compiled here")


@needs_nvcc
@pytest.mark.parametrize("name", ["timed_loop", "nccl_enqueue"])
def test_sources_compile_for_sm90(name):
    from commbench import jit

    jit.compile_check(name, arch="sm_90")


def test_op_struct_layout_matches_the_c_struct():
    # struct cb_nccl_op: pointer, int, 2 pointers, 2 size_t, 5 ints, pointer (x86-64: 80 bytes)
    assert ctypes.sizeof(nccl_native._Op) == 80
    assert nccl_native._Op.comm.offset == 72
    assert ctypes.sizeof(nccl_native._Api) == 10 * ctypes.sizeof(ctypes.c_void_p)
    assert list(nccl_native.KINDS) == ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                       "alltoall", "sendrecv"]


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
    assert native._kind("put", "nvshmem_host", True) == "host_rma"
    assert native._kind("put", "nvshmem_device", False) == "none"
    assert native._kind("put_signal", "nvshmem_host", True) is None  # its expected value grows per launch
    assert native._kind("pingpong", "nvshmem_device", True) is None  # timed in the kernel
