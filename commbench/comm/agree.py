"""Every rank takes the same branch: agreement over the MPI control plane.

A rank that fails or decides alone would leave the others waiting in the next collective
(allgather, barrier, nvshmem_malloc). ``group`` is anything with mpi4py's ``allgather``: a
``commbench.world.World`` or an mpi4py communicator.
"""
from __future__ import annotations

from ..errors import CommbenchError


class RanksDisagree(CommbenchError):
    """Another rank failed, or the ranks hold different values where they must hold one."""


def run_on_every_rank(group, fn, outcome_of, undo=None):
    """The one agreement step: run ``fn`` on this rank and learn every rank's outcome.

    Returns (fn's result, this rank's exception or None, every rank's outcome): ``outcome_of(exc)``
    turns an exception into what the ranks exchange (None when fn returned). ``undo(result)``
    releases what succeeded here when another rank failed."""
    try:
        out, err = fn(), None
    except Exception as exc:  # noqa: BLE001 - the caller re-raises, on every rank
        out, err = None, exc
    try:
        outcomes = group.allgather(None if err is None else outcome_of(err))
        if err is None and any(o is not None for o in outcomes) and undo is not None:
            undo(out)
            out = None
        return out, err, outcomes
    finally:   # this frame, in err's traceback, would hold err: a cycle that kept a failed
        err = out = None   # set-up's frames (and its device buffers) until gc ran


def agree(group, fn, what: str, undo=None):
    """Run ``fn`` on this rank; raise on every rank if it failed on any.

    The failing rank raises its own error, the others RanksDisagree naming it;
    ``undo(result)`` releases what succeeded here when another rank failed.
    """
    out, err, outcomes = run_on_every_rank(group, fn, lambda _exc: "failed", undo)
    if err is not None:
        try:
            raise err
        finally:   # this frame, in err's traceback, would hold err: a cycle that kept a failed
            err = out = None   # set-up's frames (and its device buffers) until gc ran
    failed = [r for r, o in enumerate(outcomes) if o is not None]
    if failed:
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
