"""Rank clocks on one timeline: offsets of every rank's clock to rank 0's, estimated over MPI.

Method (NTP's, over the control plane): rank 0 exchanges ``ROUNDS`` small messages
with each rank in turn; in a round rank 0 stamps t0 before sending, the rank
stamps t1 on receipt and sends it back, rank 0 stamps t2 on return. If the two
directions take equally long, the rank's clock reads ``offset = t1 - (t0 + t2) / 2``
ahead of rank 0's. Whatever the asymmetry, the true offset lies within
``rtt / 2`` of that estimate, so the round with the smallest round-trip time
(least queueing) is kept, and its ``rtt / 2`` is the stated error bound.

Clocks are CLOCK_MONOTONIC (``time.perf_counter_ns``), which the NCCL profiler
plugin also stamps. Ranks on one host share that clock: an estimate within its
error of zero there is taken as exactly zero. Offsets are estimated when a launch
starts and again before a Case once ``RESYNC_S`` have passed (drift between hosts
is a few microseconds per second at worst under NTP).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

ROUNDS = 16
RESYNC_S = 60.0
_TAG = 7321


@dataclass(frozen=True)
class ClockOffset:
    """This rank's clock minus rank 0's, and the bound on that estimate's error."""

    rank: int
    host: str
    offset_ns: int
    error_ns: int

    def to_common(self, t_ns: int) -> int:
        """A stamp of this rank's clock on rank 0's clock."""
        return t_ns - self.offset_ns


def estimate_offsets(world, rounds: int = ROUNDS) -> list[ClockOffset]:
    """Collective over ``world`` (every rank calls it); every rank gets the whole list, by rank."""
    import numpy as np

    comm = world.comm
    if world.size == 1:
        return [ClockOffset(0, world.hostname, 0, 0)]
    world.barrier()
    best: dict[int, tuple[int, int]] = {}
    ping, pong = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if world.rank == 0:
        for peer in range(1, world.size):
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                comm.Send(ping, dest=peer, tag=_TAG)
                comm.Recv(pong, source=peer, tag=_TAG)
                t2 = time.perf_counter_ns()
                rtt, theta = t2 - t0, int(pong[0]) - (t0 + t2) // 2
                if peer not in best or rtt < best[peer][0]:
                    best[peer] = (rtt, theta)
    else:
        for _ in range(rounds):
            comm.Recv(ping, source=0, tag=_TAG)
            pong[0] = time.perf_counter_ns()
            comm.Send(pong, dest=0, tag=_TAG)
    offsets = None
    if world.rank == 0:
        offsets = [ClockOffset(0, world.hosts[0], 0, 0)]
        for peer in range(1, world.size):
            rtt, theta = best[peer]
            err = rtt // 2
            if world.hosts[peer] == world.hosts[0] and abs(theta) <= err:
                theta, err = 0, 0   # one host, one clock: the estimate agrees with zero
            offsets.append(ClockOffset(peer, world.hosts[peer], theta, err))
    return world.bcast(offsets)


class Clocks:
    """The launch's offsets, refreshed before a Case once they are ``RESYNC_S`` old (rank 0 decides)."""

    def __init__(self, world, resync_s: float = RESYNC_S):
        self.world, self.resync_s = world, resync_s
        self.offsets = estimate_offsets(world)
        self.synced_at = time.monotonic()
        self.syncs = 1

    def refresh_if_stale(self) -> None:
        """Collective: every rank calls it at the same point (one bcast when nothing is due)."""
        if self.world.size == 1:
            return
        stale = self.world.bcast(time.monotonic() - self.synced_at > self.resync_s if self.world.is_root else None)
        if stale:
            self.offsets = estimate_offsets(self.world)
            self.synced_at = time.monotonic()
            self.syncs += 1

    def as_json(self) -> list[dict]:
        return [asdict(o) for o in self.offsets]
