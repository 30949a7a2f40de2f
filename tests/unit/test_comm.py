"""The communication floor's control-plane agreement and its CUDA IPC helpers (CPU parts)."""
import shutil

import pytest

from commbench import jit
from commbench.comm.agree import RanksDisagree, agree, all_true, same_everywhere


class TwoRanks:
    """allgather as rank 0 of 2 sees it: its own value, then rank 1's."""

    def __init__(self, other):
        self.other = other

    def allgather(self, mine):
        return [mine, self.other]


def test_agree_raises_on_every_rank_and_undoes_local_success():
    undone = []
    with pytest.raises(RanksDisagree, match=r"allocating failed on rank\(s\) \[1\]"):
        agree(TwoRanks("failed"), lambda: "buf", "allocating", undo=undone.append)
    assert undone == ["buf"]

    def boom():
        raise RuntimeError("local failure")

    with pytest.raises(RuntimeError, match="local failure"):   # the failing rank sees its own error
        agree(TwoRanks(None), boom, "allocating")
    assert agree(TwoRanks(None), lambda: 7, "allocating") == 7   # None: rank 1 succeeded


def test_same_everywhere_refuses_a_difference_on_every_rank():
    same_everywhere(TwoRanks(4096), 4096, "the workspace size")
    with pytest.raises(RanksDisagree, match=r"the workspace size: \[4096, 8192\]"):
        same_everywhere(TwoRanks(8192), 4096, "the workspace size")


def test_all_true_needs_every_rank():
    assert all_true(TwoRanks(True), True)
    assert not all_true(TwoRanks(False), True)
    assert not all_true(TwoRanks(True), False)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_ipc_helpers_compile_for_sm90():
    jit.compile_check("ipc", arch="sm_90")
