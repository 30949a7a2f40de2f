"""What a rank knows while it runs a launch: its World, its device and a per-launch cache."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class RankContext:
    """What a rank knows while running a launch: its World, device, and a per-launch cache.

    ``cache`` lives for the whole launch (communicators, NVSHMEM handles,
    compiled libraries); register cleanups with ``on_close``; they run in
    reverse order when the launch ends, also after an error.
    """

    world: Any  # commbench.world.World
    device: str  # "cuda:N" or "cpu"
    ranks_per_gpu: int | None = None  # most ranks bound to one GPU in the launch (> 1: shared)
    cache: dict = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def on_close(self, fn: Callable[[], None]) -> None:
        self.closers.append(fn)
