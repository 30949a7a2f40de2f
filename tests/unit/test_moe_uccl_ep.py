"""The uccl_ep backend (UCCL-EP through its DeepEP-compatible wrapper, imported as uccl_deep_ep):
what it runs, and that a machine without it, or without what its proxies need, skips its rows with
the library's own words. Whether it runs on a GPU node is the GPU session's (tests/gpu/build_uccl_ep.sh)."""
from __future__ import annotations

import sys
import types

import pytest

from commbench.errors import SkipCase
from commbench.families import get_family
from commbench.families.moe import deepep


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch):
    """Each test as a fresh process: no UCCL-EP start has failed yet."""
    monkeypatch.setattr(deepep, "_uccl_start_failed", None)


def test_uccl_ep_is_a_moe_backend_of_the_dispatch_and_combine_ops():
    fam = get_family("moe")
    assert "uccl_ep" in fam.backends


def test_absent_uccl_ep_skips_naming_the_module_and_where_it_comes_from(monkeypatch):
    monkeypatch.setitem(sys.modules, "uccl_deep_ep", None)   # import raises ImportError
    with pytest.raises(SkipCase) as exc:
        deepep.import_library("uccl_ep")
    assert "uccl_deep_ep is not importable" in str(exc.value) and "build_uccl_ep.sh" in str(exc.value)


def test_a_library_that_fails_while_importing_skips_with_its_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "deep_ep", None)
    with pytest.raises(SkipCase, match="deep_ep is not importable"):
        deepep.import_library("deepep")


def test_uccl_ep_that_cannot_bring_its_proxies_up_skips_with_its_own_error(monkeypatch):
    torch = pytest.importorskip("torch")
    from commbench.families.moe.problem import make_problem

    class Buffer:
        def __init__(self, *args, **kw):
            raise RuntimeError("Failed to find any RDMA device")

    monkeypatch.setitem(sys.modules, "uccl_deep_ep", types.SimpleNamespace(Buffer=Buffer))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: object())
    fam = get_family("moe")
    prm = {k: p.default for k, p in fam.params.items()} | {"hidden": 256, "experts": 8, "topk": 2}
    problem = make_problem(64 * 256 * 2, prm, 0, 2, "bfloat16")
    with pytest.raises(SkipCase) as exc:
        deepep.DeepEPState(problem, "dispatch", None, "cpu", backend="uccl_ep")
    assert str(exc.value) == "UCCL-EP could not start here: RuntimeError: Failed to find any RDMA device"


def test_uccl_ep_refuses_fp8_like_the_deepep_baseline(monkeypatch):
    pytest.importorskip("torch")
    from commbench.families.moe.problem import make_problem

    monkeypatch.setitem(sys.modules, "uccl_deep_ep", types.SimpleNamespace(Buffer=object))
    fam = get_family("moe")
    prm = {k: p.default for k, p in fam.params.items()} | {"hidden": 256, "experts": 8, "topk": 2}
    problem = make_problem(64 * 256 * 2, prm, 0, 2, "float8_e4m3")
    with pytest.raises(SkipCase, match="UCCL-EP baseline here runs BF16 only"):
        deepep.DeepEPState(problem, "dispatch", None, "cpu", backend="uccl_ep")


def _uccl_state(monkeypatch, buffer_cls):
    torch = pytest.importorskip("torch")
    from commbench.families.moe.problem import make_problem

    monkeypatch.setitem(sys.modules, "uccl_deep_ep", types.SimpleNamespace(Buffer=buffer_cls))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: object())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    fam = get_family("moe")
    prm = {k: p.default for k, p in fam.params.items()} | {"hidden": 256, "experts": 8, "topk": 2}
    problem = make_problem(64 * 256 * 2, prm, 0, 2, "bfloat16")
    return deepep.DeepEPState(problem, "dispatch", None, "cpu", backend="uccl_ep")


def test_uccl_ep_buffer_is_destroyed_explicitly_when_the_case_closes(monkeypatch):
    made = []

    class Buffer:
        def __init__(self, group, nvl, rdma, **kw):
            made.append(kw)
            self.destroyed = 0

        def get_dispatch_layout(self, idx, experts):
            return None, None, None, None, None

        def dispatch(self, x, **kw):
            return x, None, None, None, "handle", None

        def destroy(self):
            self.destroyed += 1

    state = _uccl_state(monkeypatch, Buffer)
    buf = state.buffer
    # destroy() is the only way UCCL-EP unregisters its proxies: without it the next Case aborts
    assert made == [{"explicitly_destroy": True}]
    state.close()
    state.close()
    assert buf.destroyed == 1


def test_a_programming_error_in_uccl_ep_is_a_failure_not_a_skip(monkeypatch):
    class Buffer:
        def __init__(self, *args, **kw):
            raise TypeError("unexpected keyword")

    with pytest.raises(TypeError):
        _uccl_state(monkeypatch, Buffer)


@pytest.mark.parametrize("ranks,ok", [(1, False), (2, True), (3, False), (8, True), (16, True), (12, False)])
def test_uccl_ep_at_a_rank_count_it_has_no_configuration_for_is_skipped_before_it_starts(ranks, ok):
    from commbench.families.base import Case

    fam = get_family("moe")
    prm = {"hidden": 2048, "experts": 480, "topk": 2}
    case = Case(suite="t", bench="b", family="moe", op="dispatch", backend="uccl_ep", variant="default", env=(),
                dtype="bfloat16", size_bytes=64 * 2048 * 2, params=tuple(sorted(prm.items())), warmup=1,
                iters=2, timing="events", ranks=ranks, ranks_per_node=ranks, timeout_s=60)
    reason = fam.unsupported(case)
    if ok:
        assert reason is None
    else:
        assert f"configurations for [2, 4, 8, 16, 24, 32, 64, 128, 144, 160] ranks, not {ranks}" in reason


class _StandInBuffer:
    """UCCL-EP's Buffer API as the layer calls it, recording the calls."""
    calls: list = []
    fail: Exception | None = None

    def __init__(self, *args, **kw):
        if _StandInBuffer.fail is not None:
            raise _StandInBuffer.fail
        _StandInBuffer.calls.append(("Buffer", args, kw))

    @staticmethod
    def set_num_sms(n):
        _StandInBuffer.calls.append(("set_num_sms", n))

    @staticmethod
    def get_low_latency_rdma_size_hint(tokens, hidden, ranks, experts):
        return 1000 * tokens + hidden + ranks + experts

    def clean_low_latency_buffer(self, tokens, hidden, experts):
        _StandInBuffer.calls.append(("clean", tokens, hidden, experts))


@pytest.fixture
def uccl_stand_in(monkeypatch):
    _StandInBuffer.calls, _StandInBuffer.fail = [], None
    monkeypatch.setitem(sys.modules, "uccl_deep_ep", types.SimpleNamespace(Buffer=_StandInBuffer))
    return _StandInBuffer


def _layer_problem():
    pytest.importorskip("torch")
    from commbench.families.moe.problem import make_problem

    fam = get_family("moe")
    prm = {k: p.default for k, p in fam.params.items()} | {"hidden": 2048, "experts": 16, "topk": 4}
    return make_problem(32 * 2048 * 2, prm, 0, 2, "bfloat16")


def test_the_layer_makes_uccl_ep_buffers_to_be_destroyed_in_either_mode(uccl_stand_in):
    from commbench.families.moe.layer_deepep import NVL_BUFFER_BYTES, uccl_layer_buffer

    p = _layer_problem()
    uccl_layer_buffer("group", p, 128, low_latency=False, num_sms=25)
    assert uccl_stand_in.calls == [("set_num_sms", 24),
                                   ("Buffer", ("group", NVL_BUFFER_BYTES, 0), {"explicitly_destroy": True})]
    uccl_stand_in.calls = []
    uccl_layer_buffer("group", p, 128, low_latency=True, num_sms=24)
    hint = 1000 * 128 + 2048 + 2 + 16
    assert uccl_stand_in.calls == [
        ("Buffer", ("group", 0, hint), {"explicitly_destroy": True, "low_latency_mode": True,
                                        "num_qps_per_rank": 8}),
        ("clean", 128, 2048, 16)]


def test_a_uccl_ep_layer_that_cannot_start_skips_with_its_words(uccl_stand_in):
    from commbench.families.moe.layer_deepep import uccl_layer_buffer

    uccl_stand_in.fail = ValueError("Duplicate physical GPU rank mapping on node")
    with pytest.raises(SkipCase, match="UCCL-EP could not start here: ValueError: Duplicate physical GPU"):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=True, num_sms=24)


def test_uccl_ep_layer_plans_its_buffers():
    from commbench.families.base import Case

    fam = get_family("moe")
    prm = {"hidden": 7168, "topk": 8, "experts": 256, "intermediate": 2048, "tokens": 128, "overlap": "none",
           "gemm": "auto"}

    def plan(backend):
        case = Case(suite="t", bench="b", family="moe", op="layer", backend=backend, variant="default", env=(),
                    dtype="bfloat16", size_bytes=128 * 7168 * 2, params=tuple(sorted(prm.items())), warmup=1,
                    iters=2, timing="events", ranks=8, ranks_per_node=8, timeout_s=60)
        return dict(fam.memory_bytes(case, 8).parts)

    assert plan("uccl_ep")["UCCL-EP NVLink buffer"] == 1 << 30
    assert plan("uccl_ep_ll")["UCCL-EP low-latency buffer"] == 2 * 2 * 256 * 128 * (7168 * 2 + 16)
    assert "UCCL-EP low-latency buffer" not in plan("deepep_ll")   # DeepEP's is made once per launch


def test_after_a_failed_start_uccl_ep_is_not_started_again_in_that_process(uccl_stand_in):
    from commbench.families.moe.layer_deepep import uccl_layer_buffer

    uccl_stand_in.fail = AssertionError("NVLink connections not available")
    with pytest.raises(SkipCase, match="could not start here: AssertionError: NVLink"):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=False, num_sms=24)
    uccl_stand_in.fail = None   # it would start now, but its proxies may still be registered
    with pytest.raises(SkipCase, match="failed to start earlier in this launch .AssertionError: NVLink"):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=False, num_sms=24)
    assert not [c for c in uccl_stand_in.calls if c[0] == "Buffer"]


def test_a_programming_error_in_uccl_ep_start_up_fails_and_later_starts_skip(uccl_stand_in):
    from commbench.families.moe.layer_deepep import uccl_layer_buffer

    uccl_stand_in.fail = TypeError("unexpected keyword")
    with pytest.raises(TypeError):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=False, num_sms=24)
    with pytest.raises(SkipCase, match="failed to start earlier"):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=False, num_sms=24)


def test_a_low_latency_buffer_whose_cleaning_fails_is_destroyed(uccl_stand_in, monkeypatch):
    from commbench.families.moe.layer_deepep import uccl_layer_buffer

    def bad_clean(self, *args):
        raise RuntimeError("clean failed")

    monkeypatch.setattr(uccl_stand_in, "clean_low_latency_buffer", bad_clean)
    monkeypatch.setattr(uccl_stand_in, "destroy", lambda self: uccl_stand_in.calls.append(("destroy",)),
                        raising=False)
    with pytest.raises(RuntimeError, match="clean failed"):
        uccl_layer_buffer("group", _layer_problem(), 128, low_latency=True, num_sms=24)
    assert uccl_stand_in.calls[-1] == ("destroy",)
