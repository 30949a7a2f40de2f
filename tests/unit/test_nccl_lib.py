"""The ncclUniqueId survives the trip through MPI intact (it contains NUL bytes)."""
import pytest

from commbench.nccl_lib import UniqueId as _UniqueId, uid_from_bytes, uid_to_bytes


def test_uid_round_trip_keeps_nul_bytes():
    raw = bytes([2, 0, 0x1f, 0x90, 0, 0, 0, 0] + list(range(120)))
    uid = uid_from_bytes(raw)
    assert uid_to_bytes(uid) == raw
    assert len(uid_to_bytes(_UniqueId())) == 128


def test_uid_wrong_length_is_refused():
    with pytest.raises(ValueError):
        uid_from_bytes(b"\x02\x00abc")
