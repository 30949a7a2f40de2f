"""CPU-proxy vs GPU-initiated transfers, measured side by side.

backend ``proxy``: GPU warps post 16-byte commands into rings in pinned host
memory; native proxy threads execute them (copy engine, or acknowledge only
with executor ``none``). backend ``direct``: the same commands, executed by
the warps themselves with SM loads/stores. Ops: ``latency`` (one command
round trip), ``rate`` (many producers, commands/s), ``bandwidth`` (one
message in chunks). See docs/families/proxy.md.
"""
from __future__ import annotations

from ...comm.context import RankContext
from ...errors import SkipCase
from ..base import Case, Family, Param, Traffic, multiple_of, power_of_two
from .native import MAX_CMD_BYTES, MAX_POLL_DELAY_NS, MAX_PRODUCERS, MAX_RING_SLOTS

MAX_CMDS_PER_PRODUCER = 1 << 20   # per iteration; far inside the kernel's uint32 per-producer counts
MAX_TIMEOUT_MS = 600_000          # 10 minutes: past any launch's own timeout
MAX_STALL_AFTER = 1 << 32         # a command count; the engine compares it with a uint64 counter


class ProxyFamily(Family):
    name = "proxy"
    summary = "CPU proxy threads vs GPU-direct transfers: latency, command rate, bandwidth"
    ops = ("latency", "rate", "bandwidth")
    backends = ("proxy", "direct")
    dtypes = ("uint8",)
    default_dtype = "uint8"
    params = {
        "executor": Param("device", (str,), "where a command's bytes go: device (same GPU), host "
                          "(pinned memory), peer (next GPU), none (proxy acknowledges, no data)",
                          ("device", "host", "peer", "none")),
        "proxy_threads": Param(1, (int,), "native proxy threads, one ring each (1-64)", range=(1, 64)),
        "num_ctas": Param(1, (int,), "producer CTAs (rate, bandwidth)", range=(1, MAX_PRODUCERS)),
        "warps_per_cta": Param(1, (int,), "producer warps per CTA; one warp is one producer", range=(1, 32)),
        "batch": Param(32, (int,), "commands a warp reserves and publishes at once (1-32; one per lane)",
                       range=(1, 32)),
        "cmds_per_producer": Param(1024, (int,), "rate: commands each producer issues per iteration",
                                   range=(1, MAX_CMDS_PER_PRODUCER)),
        "chunk_bytes": Param(1 << 20, (int,), "bandwidth: bytes per command (multiple of 8)",
                             range=(8, MAX_CMD_BYTES), check=multiple_of(8)),
        "ring_slots": Param(4096, (int,), "slots per ring (power of two, at most 32768)",
                            range=(1, MAX_RING_SLOTS), check=power_of_two),
        "ce_batch": Param(1, (int,), "copy executor: 1 submits a drained batch with cudaMemcpyBatchAsync, "
                          "0 one copy per command", choices=(0, 1)),
        "timeout_ms": Param(2000, (int,), "longest wait without progress before the kernel gives up",
                            range=(1, MAX_TIMEOUT_MS)),
        "cpu_affinity": Param("all", (str,), "all: proxy threads may use every CPU of the node even when "
                              "the launcher bound the rank to one core; inherit: keep the rank's binding",
                              ("all", "inherit")),
        "publish": Param("vec16", (str,), "how a producer publishes a command: fence (body, system fence, "
                         "tag word), release (body, tag word with a system-scope release store), vec16 "
                         "(the whole 16-byte command in one store)", ("fence", "release", "vec16")),
        "head": Param("auto", (str,), "ticket counting: atomic (one atomic per reservation) or auto "
                      "(a producer alone on its ring counts in a register)", ("atomic", "auto")),
        "poll_delay_ns": Param(400, (int,), "latency: ns a producer waits after posting before its first read of "
                               "the completion word (a read sent at once arrives before the proxy "
                               "can have answered)", range=(0, MAX_POLL_DELAY_NS)),
        "inject_stall_after": Param(0, (int,), "fault injection: each proxy thread stops after N commands "
                                    "(the row must end failed, not hang); 0 = off", range=(0, MAX_STALL_AFTER)),
    }

    def _params(self, case: Case) -> dict:
        return {k: case.param(k, p.default) for k, p in self.params.items()}

    def impossible(self, case: Case) -> tuple[str, str] | None:
        prm = self._params(case)
        if case.ranks != 1:
            return ("ranks", "the proxy family measures one process per GPU pair: use ranks: 1")
        if case.size_bytes < 8 or case.size_bytes % 8:
            return ("sizes", "sizes must be positive multiples of 8 bytes (commands count 8-byte units)")
        if case.backend == "direct" and prm["executor"] == "none":
            return ("params.executor", "executor none (delivery only) exists on the proxy path; "
                                       "the direct path has nothing to deliver")
        if case.timing == "graph":
            return ("timing", "the proxy family times its own kernels (no CUDA-graph mode)")
        producers = prm["num_ctas"] * prm["warps_per_cta"]
        if producers > MAX_PRODUCERS:
            return ("params.num_ctas", f"at most {MAX_PRODUCERS} producers (num_ctas x warps_per_cta = "
                                       f"{producers})")
        if case.op != "bandwidth" and case.size_bytes > MAX_CMD_BYTES:
            return ("sizes", f"one command moves at most {MAX_CMD_BYTES} bytes; use op bandwidth for "
                             f"larger messages")
        return None

    def setup(self, case: Case, ctx: RankContext):
        import torch

        if not torch.cuda.is_available() or not ctx.device.startswith("cuda"):
            raise SkipCase("the proxy family needs a CUDA GPU")
        from . import bench

        return bench.build(case, self._params(case), ctx.device)

    def run(self, state) -> None:
        from . import bench

        if state.op == "latency":
            import torch

            cycles = torch.zeros(1, dtype=torch.int64, device=state.src.device)
            calib = torch.zeros(2, dtype=torch.int64, device=state.src.device)
            bench.launch(state, 1, cycles, calib)
        else:
            bench.launch(state)

    def check(self, state) -> int:
        from . import bench

        return bench.check(state)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        prm = self._params(case)
        if prm["executor"] == "none":
            return Traffic(0.0, 1.0)
        if case.op == "rate":
            producers = prm["num_ctas"] * prm["warps_per_cta"]
            return Traffic(float(case.size_bytes * producers * prm["cmds_per_producer"]), 1.0)
        return Traffic(float(case.size_bytes), 1.0)

    def memory_bytes(self, case: Case, world_size: int):
        """The windows on this GPU, counters and the pattern's chunk (memory.py); pinned host
        memory is not device memory and is not counted."""
        from .memory import proxy_plan

        return proxy_plan(case, self._params(case))

    def teardown(self, state) -> None:
        from . import bench

        bench.close(state)


FAMILY = ProxyFamily()
