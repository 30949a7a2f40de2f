"""NCCL's algorithm/op table (comm/nccl_algos.py): a forced NCCL_ALGO / NCCL_PROTO that leaves an
op no algorithm is skipped with the reason before launching, in the collectives and allreduce
families (suites) alike."""
import textwrap

import pytest

from commbench.comm import nccl_algos as na
from commbench.families import get_family
from commbench.families.base import Case
from commbench.suite import load_suite


def refusal(op, env, ranks=3, rpn=1, share=False, multicast=False, dtype="float32", rop="sum"):
    return na.nccl_algo_refusal(op, env, ranks=ranks, ranks_per_node=rpn, ranks_share_gpus=share,
                                multicast=multicast, dtype=dtype, reduce_op=rop)


def test_pat_is_not_an_all_reduce():
    reason = refusal("all_reduce", {"NCCL_ALGO": "PAT"})
    assert reason.startswith("NCCL_ALGO=PAT leaves all_reduce no algorithm (NCCL has no PAT all_reduce")
    assert "Tree, Ring" in reason


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_pat_runs_all_gather_and_reduce_scatter_one_rank_per_node(op):
    assert refusal(op, {"NCCL_ALGO": "PAT"}, rpn=1) is None
    assert refusal(op, {"NCCL_ALGO": "PAT"}, rpn=4, share=True) is None   # ranks sharing a GPU: a host each
    reason = refusal(op, {"NCCL_ALGO": "PAT"}, rpn=8)
    assert "one rank per node" in reason and "8" in reason
    assert refusal(op, {"NCCL_ALGO": "PAT", "NCCL_PAT_ENABLE": "1"}, rpn=8) is None
    assert refusal(op, {"NCCL_ALGO": "PAT", "NCCL_PAT_ENABLE": "0"}, rpn=1) is not None


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_broadcast_and_reduce_are_ring_only(op):
    assert refusal(op, {"NCCL_ALGO": "Ring"}) is None
    assert "runs Ring" in refusal(op, {"NCCL_ALGO": "Tree"})
    assert refusal(op, {"NCCL_ALGO": "^Ring"}).startswith("NCCL_ALGO=^Ring leaves")
    assert refusal(op, {"NCCL_ALGO": "Tree,Ring"}) is None


def test_per_function_form_applies_to_its_function_only():
    env = {"NCCL_ALGO": "allreduce:tree;allgather:pat"}
    assert refusal("all_reduce", env) is None
    assert refusal("all_gather", env) is None
    assert refusal("broadcast", env) is None   # no entry for broadcast: NCCL's default choice


def test_point_to_point_ops_and_one_rank_are_never_refused():
    for op in ("alltoall", "alltoallv", "sendrecv", "gather", "scatter"):
        assert refusal(op, {"NCCL_ALGO": "PAT"}) is None
    assert refusal("all_reduce", {"NCCL_ALGO": "PAT"}, ranks=1) is None   # NCCL copies locally


def test_protocols_of_the_simple_only_algorithms():
    reason = refusal("all_gather", {"NCCL_ALGO": "PAT", "NCCL_PROTO": "LL"})
    assert "only NCCL's Simple protocol" in reason
    assert refusal("all_gather", {"NCCL_ALGO": "PAT", "NCCL_PROTO": "Simple"}) is None
    assert refusal("all_gather", {"NCCL_ALGO": "Ring,PAT", "NCCL_PROTO": "LL"}) is None
    assert refusal("all_reduce", {"NCCL_PROTO": "LL128"}) is None


def test_collnet_needs_its_plugin():
    reason = refusal("all_reduce", {"NCCL_ALGO": "CollNet", "NCCL_PROTO": "Simple"})
    assert "NCCL_COLLNET_ENABLE=1" in reason
    assert refusal("all_reduce", {"NCCL_ALGO": "CollNet", "NCCL_COLLNET_ENABLE": "1"}) is None


def test_nvls_needs_multicast_and_a_reduction_it_has():
    assert "multicast" in refusal("all_reduce", {"NCCL_ALGO": "NVLS"})
    assert refusal("all_reduce", {"NCCL_ALGO": "NVLS"}, multicast=True) is None
    assert "float32 with max" in refusal("all_reduce", {"NCCL_ALGO": "NVLS"}, multicast=True, rop="max")
    assert refusal("all_gather", {"NCCL_ALGO": "NVLS"}, multicast=True, rop="max") is None   # no reduction


def test_nothing_forced_is_nothing_refused():
    assert refusal("all_reduce", {}) is None
    assert na.case_refusal("all_reduce", (), ranks=8, ranks_per_node=8, multicast=False, environ={}) is None


def test_the_parent_environment_counts(monkeypatch):
    monkeypatch.setattr("commbench.sysinfo.gpus.gpu_count", lambda: 8)
    reason = na.case_refusal("all_reduce", (), ranks=8, ranks_per_node=8, multicast=False,
                             environ={"NCCL_ALGO": "PAT"})
    assert "NCCL has no PAT all_reduce" in reason
    # the Case's own variant wins over the inherited value
    assert na.case_refusal("all_reduce", (("NCCL_ALGO", "Ring"),), ranks=8, ranks_per_node=8, multicast=False,
                           environ={"NCCL_ALGO": "PAT"}) is None
    # 8 ranks on 8 GPUs of one node: PAT all_gather has no node of its own per rank
    assert "one rank per node" in na.case_refusal("all_gather", (("NCCL_ALGO", "PAT"),), ranks=8,
                                                  ranks_per_node=8, multicast=False, environ={})
    # 8 ranks sharing 1 GPU (share_gpu): each claims a host, PAT runs
    monkeypatch.setattr("commbench.sysinfo.gpus.gpu_count", lambda: 1)
    assert na.case_refusal("all_gather", (("NCCL_ALGO", "PAT"),), ranks=8, ranks_per_node=8, multicast=False,
                           environ={}) is None


def case(family, op, backend, env, ranks=3, **params):
    return Case(suite="s", bench="b", family=family, op=op, backend=backend, variant="v", env=tuple(env.items()),
                dtype="float32", size_bytes=4096, params=tuple(params.items()), warmup=1, iters=3, timing="auto",
                ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def test_families_skip_before_launching(monkeypatch):
    monkeypatch.setattr("commbench.sysinfo.gpus.gpu_count", lambda: 1)
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    coll = get_family("collectives")
    for backend in ("nccl", "torch_nccl"):
        assert "NCCL has no PAT all_reduce" in coll.unsupported(case("collectives", "all_reduce", backend,
                                                                      {"NCCL_ALGO": "PAT"}))
    assert coll.unsupported(case("collectives", "all_gather", "nccl", {"NCCL_ALGO": "PAT"})) is None
    assert coll.unsupported(case("collectives", "all_reduce", "gloo", {"NCCL_ALGO": "PAT"})) is None
    ar = get_family("allreduce")
    assert "NCCL has no PAT all_reduce" in ar.unsupported(case("allreduce", "all_reduce", "nccl",
                                                                {"NCCL_ALGO": "PAT"}, ranks=2))
    assert ar.unsupported(case("allreduce", "all_reduce", "nccl_symm", {"NCCL_ALGO": "PAT"}, ranks=2)) is None


def test_a_suite_validates_and_its_impossible_pairs_become_skips(tmp_path, monkeypatch):
    """PAT with all_reduce is a skip (the installed NCCL's limit), not a suite error."""
    monkeypatch.setattr("commbench.sysinfo.gpus.gpu_count", lambda: 1)
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""\
        name: pat
        share_gpu: true
        benchmarks:
          - {name: pat, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [4KiB], ranks: 3,
             env: {NCCL_ALGO: PAT}}
        """))
    suite = load_suite(path, gpu_count=1)
    reasons = {get_family(c.family).unsupported(c) for c in suite.cases}
    assert len(reasons) == 1 and "NCCL has no PAT all_reduce" in reasons.pop()
