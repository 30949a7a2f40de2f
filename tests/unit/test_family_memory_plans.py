"""Each family's memory plan (Family.memory_bytes) on the shapes of the shipped suites: the parts
are the shapes' arithmetic, they scale with the ranks as the families shard, and the Cases the
H100 80 GB run lost to out-of-memory errors are the ones the plan says cannot fit."""
from __future__ import annotations

from pathlib import Path

import pytest

from commbench.families import get_family
from commbench.measure.memory import GIB
from commbench.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
H100_FREE_BYTES = int(79.0 * GIB)   # an H100 80 GB's free memory with a CUDA context


def suite_cases(name: str, ranks: int = 1):
    return load_suite(ROOT / "suites" / name, gpu_count=ranks, overrides={"ranks": ranks}).cases


def pick(cases, **want):
    return next(c for c in cases if all((getattr(c, k) if hasattr(c, k) else c.param(k)) == v
                                        for k, v in want.items()))


def parts(plan) -> dict:
    return dict(plan.parts)


def test_moe_layer_weights_are_the_ranks_experts():
    fam = get_family("moe")
    one = pick(suite_cases("moe-layer.yaml"), bench="prefill", backend="ipc", model="deepseek-v3")
    assert parts(fam.memory_bytes(one, 1))["weights"] == 256 * 3 * 7168 * 2048 * 2
    assert parts(fam.memory_bytes(one, 8))["weights"] == 32 * 3 * 7168 * 2048 * 2
    symm = pick(suite_cases("moe-layer.yaml"), bench="prefill", backend="symm_a2av", model="deepseek-v3")
    assert parts(fam.memory_bytes(symm, 1))["symmetric memory"] > 0
    assert fam.memory_bytes(pick(suite_cases("moe.yaml"), op="dispatch"), 1) is None


def test_every_moe_layer_case_fits_an_h100_alone():
    fam = get_family("moe")
    worst = max(fam.memory_bytes(c, 1).peak_bytes for c in suite_cases("moe-layer.yaml")
                if not fam.unsupported(c))
    assert 20 * GIB < worst < H100_FREE_BYTES - GIB


@pytest.mark.parametrize("model, fits", [("llama3-8b", True), ("llama3-70b", False)])
def test_distopt_at_one_rank_on_an_h100(model, fits):
    fam = get_family("training")
    case = pick(suite_cases("training.yaml"), op="distopt", model=model)
    plan = fam.memory_bytes(case, 1)
    assert (plan.peak_bytes + GIB <= H100_FREE_BYTES) is fits, plan.text()
    assert plan.peak_bytes < 139 * GIB   # and on an H200 it runs (as measured there)


def test_training_shards_shrink_with_the_ranks():
    fam = get_family("training")
    case = pick(suite_cases("training.yaml"), op="distopt", model="llama3-70b")
    assert fam.memory_bytes(case, 8).resident_bytes < fam.memory_bytes(case, 1).resident_bytes
    gloo = pick(suite_cases("training-cpu.yaml", ranks=2), op="fsdp")
    assert fam.memory_bytes(gloo, 2) is None


def test_collectives_in_place_keeps_one_buffer():
    fam = get_family("collectives")
    base = pick(suite_cases("collectives.yaml"), op="all_reduce", backend="nccl", size_bytes=8 << 30)
    out_of_place = fam.memory_bytes(base, 1)
    assert parts(out_of_place) == {"send buffer": 8 << 30, "receive buffer": 8 << 30}
    import dataclasses
    in_place = dataclasses.replace(base, params=tuple(sorted({**dict(base.params), "in_place": True}.items())))
    assert parts(fam.memory_bytes(in_place, 1)) == {"buffer (in place)": 8 << 30}


@pytest.mark.parametrize("backend, buffers_gib", [("nccl", 16), ("nccl_symm", 16), ("torch_one_shot", 16),
                                                  ("cb_two_shot", 24)])   # cb: + scratch, all of it at 1 rank
def test_allreduce_8gib_plans_its_buffers_and_a_bounded_check(backend, buffers_gib):
    fam = get_family("allreduce")
    case = pick(suite_cases("allreduce-algos.yaml"), backend=backend, size_bytes=8 * 1024 ** 3)
    plan = fam.memory_bytes(case, 1)
    assert buffers_gib * GIB <= plan.resident_bytes < (buffers_gib + 0.1) * GIB, plan.text()
    check = max(b for _, b in plan.transient)
    assert check < GIB   # the pattern's chunks, not the whole buffer in int64 (32 GiB at 8 GiB BF16)
    assert plan.peak_bytes + GIB <= H100_FREE_BYTES   # the Cases that ran out of memory on the H100 fit


def test_allreduce_check_temporaries_shrink_with_small_sizes():
    fam = get_family("allreduce")
    small = pick(suite_cases("allreduce-algos.yaml"), backend="nccl", size_bytes=8)
    assert fam.memory_bytes(small, 1).peak_bytes < 1024
