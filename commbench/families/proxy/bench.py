"""Per-Case state of the proxy family: buffers, engine, launches, timing, checks.

One producer is one warp. The proxy path posts 16-byte commands into rings
that native proxy threads drain; the direct path runs the same commands on
the SMs. Counters (posted, executed, order errors) persist across launches,
so check() verifies every command of the Case, timed ones included.
"""
from __future__ import annotations

import os
import statistics
from contextlib import contextmanager
from dataclasses import dataclass

from ...measure.state import CaseState
from ...comm.buffers import chunk_ranges
from . import native
from .native import KERNEL_ERRORS, ProxyError

WINDOW_CAP_BYTES = 256 << 20  # rate: regions wrap inside this much memory
# The source pattern is written, and the destination compared with it, in chunks of this many
# 4-byte words: the int64 index (the pattern's arithmetic runs in place on it) and the compared
# chunk stay this size whatever the window (memory.py counts them). Over a whole 256 MiB window
# the index and its arithmetic took 6 bytes per byte, 1.5 GiB.
CHUNK_WORDS = 1 << 22


@dataclass
class ProxyState(CaseState):
    op: str
    backend: str
    executor: str
    prm: dict
    device: int
    src: object = None
    dst: object = None
    engine: native.Engine | None = None
    producers: int = 1
    num_regions: int = 1
    window_bytes: int = 0
    broken: str = ""

    # --- derived ---
    @property
    def direct(self) -> bool:
        return self.backend == "direct"

    @property
    def commands_per_iter(self) -> int:
        if self.op == "latency":
            return 1
        if self.op == "rate":
            return self.producers * self.prm["cmds_per_producer"]
        chunk = self.prm["chunk_bytes"]
        return (self.size_bytes + chunk - 1) // chunk


def build(case, prm: dict, device: str) -> ProxyState:
    import torch

    from ...errors import SkipCase

    dev = torch.device(device)
    st = ProxyState(op=case.op, backend=case.backend, executor=prm["executor"], prm=prm,
                    size_bytes=case.size_bytes, device=dev.index or 0, count=0)
    if case.op == "latency":
        st.measure = lambda warmup, iters: measure_latency(st, warmup, iters)
    else:  # timed by the runner (events on st.stream); the rate follows from its median
        st.columns_from_time = lambda time_us: rate_columns(st, time_us)
    st.producers = producers(case.op, prm)
    st.num_regions, st.window_bytes = window(case.op, case.size_bytes, st.producers, prm["cmds_per_producer"])
    st.count = st.window_bytes
    st.stream = torch.cuda.Stream(device=dev)
    st.src = torch.empty(st.window_bytes, dtype=torch.uint8, device=dev)
    if st.executor == "host":
        st.dst = torch.zeros(st.window_bytes, dtype=torch.uint8, pin_memory=True)
    elif st.executor == "peer":
        n = torch.cuda.device_count()
        if n < 2:
            raise SkipCase(f"the peer executor needs 2 GPUs; this machine has {n}")
        peer = (st.device + 1) % n
        native.check_launch(native.library().proxy_enable_peer(st.device, peer), "enabling peer access")
        st.dst = torch.zeros(st.window_bytes, dtype=torch.uint8, device=torch.device("cuda", peer))
    else:
        st.dst = torch.zeros(st.window_bytes, dtype=torch.uint8, device=dev)
    fill(st, salt=1)
    st.posted = torch.zeros(st.producers, dtype=torch.int32, device=dev)
    st.direct_done = torch.zeros(st.producers, dtype=torch.int32, device=dev)
    st.error = torch.zeros(2, dtype=torch.int32, device=dev)
    torch.cuda.synchronize(dev)
    if not st.direct:
        with proxy_cpus(prm["cpu_affinity"]):
            st.engine = native.Engine(device=st.device, threads=prm["proxy_threads"], slots=prm["ring_slots"],
                                      producers=st.producers, executor=st.executor,
                                      src_ptr=st.src.data_ptr(), dst_ptr=st.dst.data_ptr(),
                                      use_batch=bool(prm["ce_batch"]),
                                      stall_after=prm["inject_stall_after"])
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    st.extra = {"producers": st.producers, "commands": st.commands_per_iter,
                "sms_used": 1 if case.op == "latency" else min(prm["num_ctas"], sms),
                "cpu_threads": 0 if st.direct else prm["proxy_threads"],
                "cpus_allowed": allowed_cpus_after(prm["cpu_affinity"])}
    return st


def producers(op: str, prm: dict) -> int:
    """Producer warps: one for latency, num_ctas x warps_per_cta otherwise."""
    return 1 if op == "latency" else prm["num_ctas"] * prm["warps_per_cta"]


def window(op: str, size_bytes: int, producers: int, cmds_per_producer: int) -> tuple[int, int]:
    """(regions, bytes) of the source and destination windows: rate spreads its commands over
    regions of one message each, wrapping inside WINDOW_CAP_BYTES (at least one region); latency
    and bandwidth use one message."""
    if op != "rate":
        return 1, size_bytes
    regions = max(1, min(producers * cmds_per_producer, WINDOW_CAP_BYTES // max(size_bytes, 1)))
    return regions, regions * size_bytes


def allowed_cpus_after(mode: str) -> int:
    """CPUs the proxy threads may run on (a launcher binding the rank to one core shows here)."""
    if not hasattr(os, "sched_getaffinity"):
        return os.cpu_count() or 1
    if mode == "all":
        with proxy_cpus(mode):
            return len(os.sched_getaffinity(0))
    return len(os.sched_getaffinity(0))


@contextmanager
def proxy_cpus(mode: str):
    """While creating the engine, let this thread (and so the proxy threads it starts, which
    inherit its mask) run on every CPU of the node: MPI launchers often bind a rank to one
    core, which makes N busy-polling proxy threads time-share it. The caller's mask is restored."""
    if mode != "all" or not hasattr(os, "sched_setaffinity"):
        yield
        return
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except OSError:  # cpuset forbids some CPUs: keep the launcher's mask
        pass
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def fill(st: ProxyState, salt: int) -> None:
    """Verifiable non-zero bytes in the source window; a new salt per check pass."""
    fill_words(st.src[:st.window_bytes], salt)


def fill_words(buf, salt: int) -> None:
    """Word i of the uint8 tensor ``buf`` (whole 4-byte words) gets ((i * 2654435761 + salt *
    40503) & 0x7FFFFFFF) | 1, chunk by chunk (any device)."""
    import torch

    words = buf.view(torch.int32)
    for start, stop in chunk_ranges(words.numel(), CHUNK_WORDS):
        i = torch.arange(start, stop, dtype=torch.int64, device=buf.device)
        words[start:stop].copy_(i.mul_(2654435761).add_(salt * 40503).bitwise_and_(0x7FFFFFFF).bitwise_or_(1))


def count_wrong_bytes(got, want) -> int:
    """Bytes of ``got`` (uint8, on any device: the host or a peer GPU) that differ from ``want``
    (uint8, the source), compared chunk by chunk on ``want``'s device."""
    wrong = 0
    for start, stop in chunk_ranges(want.numel(), 4 * CHUNK_WORDS):
        wrong = wrong + (got[start:stop].to(want.device) != want[start:stop]).sum()
    return int(wrong)


def launch(st: ProxyState, iters: int = 1, cycles=None, calib=None) -> None:
    """Enqueue one op (latency: `iters` round trips in one kernel) on st.stream."""
    if st.broken:
        raise ProxyError(f"proxy engine unusable after an earlier failure: {st.broken}")
    lib = native.library()
    op_code = 0 if st.executor == "none" else 1
    dst_system = int(st.executor in ("host", "peer"))
    eng = st.engine.handle if st.engine else None
    timeout_ns = int(st.prm["timeout_ms"]) * 1_000_000
    delivery = (native.PUBLISH[st.prm["publish"]], native.HEADS[st.prm["head"]], st.prm["poll_delay_ns"])
    stream = st.stream.cuda_stream
    if st.op == "latency":
        rc = lib.proxy_launch_latency(eng, int(st.direct), op_code, iters, st.size_bytes, st.src.data_ptr(),
                                      st.dst.data_ptr(), dst_system, st.posted.data_ptr(),
                                      st.direct_done.data_ptr(), st.error.data_ptr(), timeout_ns, *delivery,
                                      cycles.data_ptr(), calib.data_ptr(), stream)
    else:
        layout = 0 if st.op == "rate" else 1
        rc = lib.proxy_launch_stream(eng, int(st.direct), op_code, layout, st.prm["num_ctas"],
                                     st.prm["warps_per_cta"], st.prm["cmds_per_producer"], st.prm["batch"],
                                     st.size_bytes, st.prm["chunk_bytes"], st.num_regions, st.src.data_ptr(),
                                     st.dst.data_ptr(), dst_system, st.posted.data_ptr(),
                                     st.direct_done.data_ptr(), st.error.data_ptr(), timeout_ns, *delivery,
                                     stream)
    native.check_launch(rc, f"{st.op} kernel launch")


def raise_if_failed(st: ProxyState) -> None:
    """After a sync: turn the kernel's error flag or an executor error into ProxyError."""
    code, producer = (int(x) for x in st.error.cpu())
    counters = st.engine.counters() if st.engine else {}
    why = ""
    if code:
        why = KERNEL_ERRORS.get(code, f"kernel error {code}").format(p=producer)
    elif counters.get("exec_error"):
        why = f"executor failed: {native.cuda_error(counters['exec_error'])}"
    if why:
        if counters.get("stalled_threads"):
            why += f" ({counters['stalled_threads']} proxy thread(s) stalled by inject_stall_after)"
        st.broken = why
        raise ProxyError(why)


def measure_latency(st: ProxyState, warmup: int, iters: int) -> list[float]:
    """Round trips timed by the kernel's own clock (calibrated to ns): one sample per command."""
    import torch

    n = warmup + iters
    cycles = torch.zeros(n, dtype=torch.int64, device=st.src.device)
    calib = torch.zeros(2, dtype=torch.int64, device=st.src.device)
    launch(st, n, cycles, calib)
    st.stream.synchronize()
    raise_if_failed(st)
    ns_total, cyc_total = (int(x) for x in calib.cpu())
    us_per_cycle = ns_total / max(cyc_total, 1) / 1000.0
    samples = [c * us_per_cycle for c in cycles.cpu().tolist()[warmup:]]
    qs = statistics.quantiles(samples, n=100) if len(samples) > 1 else samples * 99
    st.extra.update(latency_p50_us=statistics.median(samples), latency_p99_us=qs[98])
    st.timing_label = "kernel-clock"
    return samples


def rate_columns(st: ProxyState, time_us: float) -> dict:
    """Million commands per second at the Case's median time per iteration."""
    return {"rate_mops": st.commands_per_iter / time_us if time_us > 0 else None}


def check(st: ProxyState) -> int:
    """Untimed pass on fresh data; wrong = bad bytes + lost/duplicated/reordered commands."""
    import torch

    st.stream.synchronize()
    raise_if_failed(st)  # a failure during the timed batch
    fill(st, salt=7)
    st.dst.zero_()
    torch.cuda.synchronize(st.src.device)
    if st.op == "latency":
        cycles = torch.zeros(4, dtype=torch.int64, device=st.src.device)
        calib = torch.zeros(2, dtype=torch.int64, device=st.src.device)
        launch(st, 4, cycles, calib)
    else:
        launch(st)
    st.stream.synchronize()
    raise_if_failed(st)
    wrong = 0
    if st.executor != "none":
        covered = st.window_bytes
        wrong += count_wrong_bytes(st.dst[:covered], st.src[:covered])
    posted = st.posted.cpu().tolist()
    if st.direct:
        done = st.direct_done.cpu().tolist()
        order_errors = 0
    else:
        done = st.engine.executed()
        order_errors = st.engine.counters()["order_errors"]
    wrong += sum(abs((d - p + 2**31) % 2**32 - 2**31) for d, p in zip(done, posted))
    wrong += order_errors
    st.extra.update(commands_checked=sum(posted), order_errors=order_errors)
    return wrong


def close(st: ProxyState) -> None:
    if st.engine is not None:
        st.engine.close()
        st.engine = None
