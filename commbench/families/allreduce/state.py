"""What every all-reduce backend hands the family after setup."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ...measure.state import CaseState
from . import data


@dataclass
class ArState(CaseState):
    """The runner reads the CaseState fields (stream, extra, count, native); the rest drives
    run/check/teardown."""

    world: Any
    dtype: str
    enqueue: Callable[[], None]
    refill: Callable[[], None]            # rewrite this rank's input pattern
    output: Callable[[], Any]             # 1-D tensor, ``count`` elements, result of the last op
    clear: Callable[[], None] = lambda: None  # poison the output before the check
    after_check: Callable[[], None] = lambda: None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        while self.closers:
            self.closers.pop()()


def verify(state: ArState) -> int:
    """Untimed check: fresh inputs, one op, compare with the exact sum. Collective over ranks."""
    import torch

    torch.cuda.synchronize()
    state.world.comm.Barrier()  # no peer may still read our input
    state.refill()
    state.clear()
    torch.cuda.synchronize()
    state.world.comm.Barrier()  # every input rewritten before anyone reads
    state.enqueue()
    state.stream.synchronize()
    wrong = data.count_wrong(state.output()[: state.count], state.world.size, state.dtype)
    state.after_check()
    return wrong
