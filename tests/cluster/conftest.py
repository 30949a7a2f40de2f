"""A 4-node network-namespace cluster for the multi-node tests, torn down whatever happens.

Skipped with the reason where namespaces cannot be made (not root, no iproute2, not Linux).
CB_CLUSTER_SEED picks the impaired node/link (default: random, printed on failure).
CB_CLUSTER_PREFIX / CB_CLUSTER_NET name the test cluster (default cbt, 10.213.23): two runs at once
need different names; a run whose names another live run holds skips instead of tearing it down."""
from __future__ import annotations

import os
import random

import pytest

from tests.cluster.testbed import Cluster, ClusterUnavailable, why_unavailable


@pytest.fixture(scope="session")
def cluster():
    reason = why_unavailable()
    if reason:
        pytest.skip(f"network-namespace cluster unavailable: {reason}")
    from tests.conftest import has_mpiexec

    if not has_mpiexec():
        pytest.skip("no mpiexec/mpi4py on this machine")
    bed = Cluster(prefix=os.environ.get("CB_CLUSTER_PREFIX", "cbt"),
                  net=os.environ.get("CB_CLUSTER_NET", "10.213.23"))
    try:
        bed.up()
    except ClusterUnavailable as exc:
        bed.down()
        pytest.skip(f"network-namespace cluster unavailable: {exc}")
    try:
        yield bed
    finally:
        bed.down()


@pytest.fixture
def healthy(cluster):
    """The cluster with no impairment and every node alive, before and after the test."""
    cluster.heal()
    yield cluster
    cluster.heal()


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("CB_CLUSTER_SEED", random.randrange(1 << 30)))
    request.node.user_properties.append(("seed", seed))
    print(f"CB_CLUSTER_SEED={seed}")
    return random.Random(seed)
