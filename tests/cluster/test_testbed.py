"""The test bed's own guard (no root needed): a run must not tear down a cluster another live run
holds (a second pytest, a rehearsal with the same names)."""
from __future__ import annotations

import pytest

from tests.cluster.testbed import Cluster, ClusterUnavailable


def test_a_cluster_in_use_is_neither_shared_nor_torn_down(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(Cluster, "script", lambda self, *args, **kw: calls.append((self.prefix, args)))
    first = Cluster(prefix="cbq", net="10.213.99", state=tmp_path / "state")
    first.up()
    assert calls == [("cbq", ("down",)), ("cbq", ("up", "-n", "4", "--rate-mbit", "1000"))]
    calls.clear()
    second = Cluster(prefix="cbq", net="10.213.99", state=tmp_path / "state")
    with pytest.raises(ClusterUnavailable, match="in use by another run"):
        second.up()
    second.down()  # the conftest's cleanup after a failed up
    assert calls == []  # the first run's cluster was not touched
    first.down()
    assert calls == [("cbq", ("down",))]
    calls.clear()
    second.up()  # free again once the first is down
    assert calls[0] == ("cbq", ("down",))
    second.down()
