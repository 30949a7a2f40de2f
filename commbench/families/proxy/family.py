"""CPU-proxy vs GPU-initiated transfers, measured side by side.

backend ``proxy``: GPU warps post 16-byte commands into rings in pinned host
memory; native proxy threads execute them (copy engine, or acknowledge only
with executor ``none``). backend ``direct``: the same commands, executed by
the warps themselves with SM loads/stores. Ops: ``latency`` (one command
round trip), ``rate`` (many producers, commands/s), ``bandwidth`` (one
message in chunks). See docs/families/proxy.md.
"""
from __future__ import annotations

from ...errors import SkipCase
from ..base import Case, Family, Param, RankContext, Traffic


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


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
        "proxy_threads": Param(1, (int,), "native proxy threads, one ring each (1-64)"),
        "num_ctas": Param(1, (int,), "producer CTAs (rate, bandwidth)"),
        "warps_per_cta": Param(1, (int,), "producer warps per CTA; one warp is one producer"),
        "batch": Param(32, (int,), "commands a warp reserves and publishes at once (1-32)"),
        "cmds_per_producer": Param(1024, (int,), "rate: commands each producer issues per iteration"),
        "chunk_bytes": Param(1 << 20, (int,), "bandwidth: bytes per command (multiple of 8)"),
        "ring_slots": Param(4096, (int,), "slots per ring (power of two, at most 32768)"),
        "ce_batch": Param(1, (int,), "copy executor: 1 submits a drained batch with cudaMemcpyBatchAsync"),
        "timeout_ms": Param(2000, (int,), "longest wait without progress before the kernel gives up"),
        "cpu_affinity": Param("all", (str,), "all: proxy threads may use every CPU of the node even when "
                              "the launcher bound the rank to one core; inherit: keep the rank's binding",
                              ("all", "inherit")),
        "inject_stall_after": Param(0, (int,), "fault injection: each proxy thread stops after N commands "
                                    "(the row must end failed, not hang); 0 = off"),
    }

    def _params(self, case: Case) -> dict:
        return {k: case.param(k, p.default) for k, p in self.params.items()}

    def unsupported(self, case: Case) -> str | None:
        from .native import MAX_CMD_BYTES, MAX_PRODUCERS, MAX_RING_SLOTS

        prm = self._params(case)
        if case.ranks != 1:
            return "the proxy family measures one process per GPU pair: use ranks: 1"
        if case.size_bytes < 8 or case.size_bytes % 8:
            return "sizes must be positive multiples of 8 bytes (commands count 8-byte units)"
        if case.backend == "direct" and prm["executor"] == "none":
            return "executor none (delivery only) exists on the proxy path; the direct path has nothing to deliver"
        if case.timing == "graph":
            return "the proxy family times its own kernels (no CUDA-graph mode)"
        if not 1 <= prm["batch"] <= 32:
            return "batch must be 1..32 (one command per lane)"
        if not 1 <= prm["proxy_threads"] <= 64:
            return "proxy_threads must be 1..64"
        if not _is_pow2(prm["ring_slots"]) or prm["ring_slots"] > MAX_RING_SLOTS:
            return f"ring_slots must be a power of two <= {MAX_RING_SLOTS}"
        producers = prm["num_ctas"] * prm["warps_per_cta"]
        if prm["num_ctas"] < 1 or not 1 <= prm["warps_per_cta"] <= 32 or producers > MAX_PRODUCERS:
            return f"num_ctas >= 1, warps_per_cta 1..32, at most {MAX_PRODUCERS} producers"
        if case.op == "bandwidth":
            chunk = prm["chunk_bytes"]
            if chunk < 8 or chunk % 8 or chunk > MAX_CMD_BYTES:
                return f"chunk_bytes must be a multiple of 8 in 8..{MAX_CMD_BYTES}"
        elif case.size_bytes > MAX_CMD_BYTES:
            return f"one command moves at most {MAX_CMD_BYTES} bytes; use op bandwidth for larger messages"
        if case.op == "rate" and prm["cmds_per_producer"] < 1:
            return "cmds_per_producer must be >= 1"
        if prm["timeout_ms"] < 1:
            return "timeout_ms must be >= 1"
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

    def teardown(self, state) -> None:
        from . import bench

        bench.close(state)


FAMILY = ProxyFamily()
