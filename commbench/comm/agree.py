"""Every rank takes the same branch: agreement over the MPI control plane.

A rank that fails or decides alone would leave the others waiting in the next collective
(allgather, barrier, nvshmem_malloc). ``group`` is anything with mpi4py's ``allgather``: a
``commbench.world.World`` or an mpi4py communicator.
"""
from __future__ import annotations

from ..errors import CommbenchError


class RanksDisagree(CommbenchError):
    """Another rank failed, or the ranks hold different values where they must hold one."""


def agree(group, fn, what: str, undo=None):
    """Run ``fn`` on this rank; raise on every rank if it failed on any.

    The failing rank raises its own error, the others RanksDisagree naming it;
    ``undo(result)`` releases what succeeded here when another rank failed.
    """
    try:
        out, err = fn(), None
    except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
        out, err = None, exc
    failed = [r for r, ok in enumerate(group.allgather(err is None)) if not ok]
    if err is not None:
        try:
            raise err
        finally:   # this frame, in err's traceback, would hold err: a cycle that kept a failed
            err = out = None   # set-up's frames (and its device buffers) until gc ran
    if failed:
        if undo is not None:
            undo(out)
        raise RanksDisagree(f"{what} failed on rank(s) {failed} (see the launch log)")
    return out


def same_everywhere(group, value, what: str) -> None:
    """Refuse (on every rank) a ``value`` that differs between ranks."""
    values = group.allgather(value)
    if len(set(values)) != 1:
        raise RanksDisagree(f"ranks disagree on {what}: {values}")


def all_true(group, flag: bool) -> bool:
    """True on every rank when ``flag`` is true on every rank."""
    return all(group.allgather(bool(flag)))
