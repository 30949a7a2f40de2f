"""DeepEP v1.2.1's own limits (families/moe/deepep_limits.py): its low-latency hidden sizes and
topk, its normal kernels' rank counts, skipped with the reason before DeepEP is called, in the moe
family (suites) and in benchmarks/moe_ll_workers.py (the anchors' DeepEP worker)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from commbench.families import get_family
from commbench.families.base import Case
from commbench.families.moe import deepep_limits as dl

ROOT = Path(__file__).resolve().parents[2]


def ll(**kw):
    shape = {"hidden": 7168, "topk": 8, "experts": 256, "ranks": 1, **kw}
    return dl.ll_refusal(**shape)


def test_low_latency_hidden_sizes():
    assert ll() is None and ll(hidden=6144) is None and ll(hidden=2560) is None
    field, reason = ll(hidden=3072)
    assert field == "params.hidden" and "not 3072" in reason and "7168" in reason and "v1.2.1" in reason


@pytest.mark.parametrize("kw, field, text", [
    ({"topk": 12}, "params.topk", "topk <= 11"),
    ({"experts": 255, "ranks": 2}, "params.experts", "a multiple of the ranks"),
    ({"experts": 240, "ranks": 12}, "ranks", "multiple of 8, not 12"),
    ({"ranks": 3, "experts": 255, "tokens": 127}, "params.tokens", "multiple of 4"),
])
def test_low_latency_other_limits(kw, field, text):
    got = ll(**kw)
    assert got is not None and got[0] == field and text in got[1]


def test_low_latency_takes_what_deepep_takes():
    assert ll(ranks=3, experts=255, tokens=128) is None   # 3 ranks: fewer than 8
    assert ll(ranks=16, experts=256, tokens=128) is None


def normal(**kw):
    args = {"ranks": 8, "ranks_per_node": 8, "experts": 256, "hidden": 7168, **kw}
    return dl.normal_refusal(**args)


def test_normal_kernels_rank_counts():
    assert normal() is None and normal(ranks=2, ranks_per_node=2) is None
    field, reason = normal(ranks=3, ranks_per_node=3, experts=255)
    assert field == "ranks" and "[2, 4, 8] ranks, not 3" in reason
    assert normal(ranks=1, ranks_per_node=1)[0] == "ranks"
    assert normal(ranks=16, ranks_per_node=8)[0] == "ranks"          # no RDMA buffer here
    assert normal(ranks=8, ranks_per_node=4)[0] == "ranks_per_node"
    assert "at most 128 experts per rank" in normal(ranks=2, ranks_per_node=2, experts=512)[1]
    assert normal(hidden=7164)[0] == "params.hidden"


def moe_case(backend, op="dispatch", ranks=3, **params):
    prm = {"hidden": 7168, "topk": 8, "experts": 288, **params}
    size = 128 * prm["hidden"] * 2
    return Case(suite="s", bench="b", family="moe", op=op, backend=backend, variant="default", env=(),
                dtype="bfloat16", size_bytes=size, params=tuple(prm.items()), warmup=1, iters=3, timing="auto",
                ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def test_the_moe_family_skips_deepep_before_launching():
    fam = get_family("moe")
    assert "[2, 4, 8] ranks, not 3" in fam.unsupported(moe_case("deepep"))            # dispatch, combine
    assert fam.unsupported(moe_case("deepep", ranks=4)) is None
    assert fam.unsupported(moe_case("ipc")) is None                                    # ours take 3 ranks


def test_benchmark_worker_skips_shapes_deepep_refuses(tmp_path, monkeypatch):
    pytest.importorskip("torch")   # moe_ll_workers imports it (no GPU needed)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("moe_ll_workers", ROOT / "benchmarks" / "moe_ll_workers.py")
    workers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workers)
    monkeypatch.setitem(workers.SHAPES, "h3072-e128", {"hidden": 3072, "experts": 128, "topk": 8, "routing": "random"})
    assert set(workers.deepep_refusals(["h3072-e128", "qwen3-235b-a22b"], 1)) == {"h3072-e128"}
    # every shape refused: records say why, and DeepEP is never imported (it is not installed here)
    monkeypatch.setitem(sys.modules, "deep_ep", None)
    out = tmp_path / "records.jsonl"
    ctx = SimpleNamespace(world=SimpleNamespace(rank=0, size=1))
    assert workers.run_deepep(ctx, ["h3072-e128"], str(out), iters=1) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["dtype"] for r in recs] == list(workers.DTYPES)
    assert all(r["impl"] == "deepep_ll" and "not 3072" in r["skipped"] for r in recs)


def test_anchor_report_says_why_deepep_was_not_compared():
    spec = importlib.util.spec_from_file_location("anchors_report", ROOT / "benchmarks" / "anchors_report.py")
    rep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rep)
    ours = {"impl": "ipc_ll", "variant": "default", "shape": "h3072-e128", "dtype": "bfloat16", "ranks": 1,
            "dispatch_kernel_us": 10.0, "combine_kernel_us": 9.0}
    theirs = {"impl": "ipc_ll", "variant": "default", "shape": "qwen3", "dtype": "bfloat16", "ranks": 1,
              "dispatch_kernel_us": 10.0, "combine_kernel_us": 9.0, "dispatch_graph_us": 11.0, "combine_graph_us": 10.0}
    dep = dict(theirs, impl="deepep_ll", variant="v1.2.1", dispatch_kernel_us=20.0, combine_kernel_us=20.0,
               dispatch_graph_us=21.0, combine_graph_us=21.0)
    skipped = {"impl": "deepep_ll", "variant": "v1.2.1", "shape": "h3072-e128", "dtype": "bfloat16", "ranks": 1,
               "skipped": "DeepEP v1.2.1's low-latency kernels are built for hidden in [...], not 3072"}
    recs = [ours, theirs, dep, skipped]
    lines, met = rep.ll_verdicts(recs)
    assert met is True
    assert any("Not compared" in line and "not 3072" in line for line in lines)
    assert rep.ll_problems(recs) == []
