"""ctypes bindings to kernels/proxy.cu: the native proxy engine, kernel launchers, CPU self-test."""
from __future__ import annotations

import ctypes
from functools import lru_cache

from ...errors import CommbenchError

EXECUTORS = {"none": 0, "device": 1, "host": 1, "peer": 1}  # ack-only vs copy engine
MAX_PRODUCERS = 4096
MAX_CMD_BYTES = ((1 << 24) - 1) * 8
MAX_RING_SLOTS = 1 << 15
# How a producer publishes a slot (kernels/proxy_ring.cuh Publish) and who counts a ring's tickets.
PUBLISH = {"fence": 0, "release": 1, "vec16": 2}
HEADS = {"atomic": 0, "auto": 1}
MAX_POLL_DELAY_NS = 100_000

_u32, _u64, _int, _vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p
_SIGNATURES = {
    "proxy_engine_create": (_vp, [_int, _int, _u32, _u32, _u32, _int, _int, _vp, _vp, _u64, _u64,
                                  ctypes.POINTER(_int)]),
    "proxy_engine_destroy": (None, [_vp]),
    "proxy_engine_counters": (None, [_vp, ctypes.POINTER(_u64)]),
    "proxy_engine_executed": (None, [_vp, ctypes.POINTER(_u32), _u32]),
    "proxy_launch_stream": (_int, [_vp, _int, _int, _int, _u32, _u32, _u32, _u32, _u64, _u64, _u64,
                                   _vp, _vp, _int, _vp, _vp, _vp, _u64, _int, _int, _u32, _vp]),
    "proxy_launch_latency": (_int, [_vp, _int, _int, _u32, _u64, _vp, _vp, _int, _vp, _vp, _vp, _u64,
                                    _int, _int, _u32, _vp, _vp, _vp]),
    "proxy_enable_peer": (_int, [_int, _int]),
    "proxy_error_string": (ctypes.c_char_p, [_int]),
    "proxy_selftest": (_int, [_u32, _u32, _u32, _u32, _u32, _u64, _u64, ctypes.POINTER(_u64)]),
}

KERNEL_ERRORS = {
    1: "ring stayed full: the proxy stalled or died, producer {p} gave up waiting for a free slot",
    2: "completions never arrived: producer {p} gave up waiting for the proxy",
    3: "aborted after another producer failed",
}


class ProxyError(CommbenchError):
    """A proxy transfer failed: a bounded wait timed out, or an executor or launch failed."""


@lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """Build (cached) and load kernels/proxy.cu with argument types declared."""
    from ... import jit

    lib = jit.load("proxy", libs=["-lpthread"])
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def cuda_error(code: int) -> str:
    return library().proxy_error_string(code).decode()


def check_launch(code: int, what: str) -> None:
    if code:
        raise ProxyError(f"{what} failed: {cuda_error(code)} ({code})")


def selftest(producers: int, threads: int, cmds: int, slots: int, batch: int,
             drop_every: int = 0, timeout_ms: int = 5000) -> dict:
    """Host producer threads -> rings -> proxy threads, no GPU. Returns the checker's counts."""
    out = (_u64 * 6)()
    rc = library().proxy_selftest(producers, threads, cmds, slots, batch, drop_every, timeout_ms, out)
    if rc:
        raise ProxyError(f"self-test refused its configuration (rc={rc})")
    keys = ("executed", "order_errors", "lost", "extra", "backpressure_waits", "timeouts")
    return dict(zip(keys, (int(v) for v in out)))


class Engine:
    """Proxy threads (one ring each) feeding an executor; close() stops them cleanly."""

    def __init__(self, *, device: int, threads: int, slots: int, producers: int, executor: str,
                 src_ptr: int = 0, dst_ptr: int = 0, use_batch: bool = True, stall_after: int = 0,
                 drop_every: int = 0, host_only: bool = False):
        self.lib = library()
        self.producers = producers
        status = _int(0)
        self.handle = self.lib.proxy_engine_create(
            device, int(host_only), threads, slots, producers, EXECUTORS[executor], int(use_batch),
            src_ptr or None, dst_ptr or None, stall_after, drop_every, ctypes.byref(status))
        if not self.handle:
            code = status.value
            why = {-1: "bad configuration", -2: "driver has no cuStreamWriteValue32"}.get(code)
            raise ProxyError(f"proxy engine did not start: {why or cuda_error(code)}")

    def counters(self) -> dict:
        out = (_u64 * 4)()
        self.lib.proxy_engine_counters(self.handle, out)
        return {"consumed": int(out[0]), "order_errors": int(out[1]), "exec_error": int(out[2]),
                "stalled_threads": int(out[3])}

    def executed(self) -> list[int]:
        out = (_u32 * self.producers)()
        self.lib.proxy_engine_executed(self.handle, out, self.producers)
        return list(out)

    def close(self) -> None:
        if self.handle:
            self.lib.proxy_engine_destroy(self.handle)
            self.handle = None
