"""benchmarks/anchors_report.py: shape parsing, verdicts against the targets, tables, exit status."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("anchors_report", ROOT / "benchmarks" / "anchors_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rep = _module()
KNOWN = {"deepseek-v3": {}, "qwen3-235b-a22b": {}, "mixtral-8x7b": {}, "h6144-e128": {}}


def test_parse_shape_fills_tokens_and_topk():
    assert rep.parse_shape("h7168-e256-t128") == "h7168-e256-t128:hidden=7168,experts=256,topk=8,tokens=128"
    assert rep.parse_shape("h4096-e4") == "h4096-e4:hidden=4096,experts=4,topk=4,tokens=128"
    assert rep.parse_shape("h2048-e64-t512-k6") == "h2048-e64-t512-k6:hidden=2048,experts=64,topk=6,tokens=512"


@pytest.mark.parametrize("bad, why", [("7168-256", "expected a preset"), ("h7000-e256", "multiple of 128"),
                                      ("h7168-e256-t20000", "tokens per rank"),
                                      ("h7168-e4-k8", "top-k"), ("h7168-e2000", "experts 1-1024")])
def test_parse_shape_refuses(bad, why):
    with pytest.raises(ValueError, match=why):
        rep.parse_shape(bad)


def test_parse_shapes_expands_issue_and_keeps_order():
    named, specs = rep.parse_shapes("issue,h7168-e256-t64,deepseek-v3,h7168-e256-t64", KNOWN)
    assert named == list(rep.ISSUE_SHAPES)
    assert specs == ["h7168-e256-t64:hidden=7168,experts=256,topk=8,tokens=64"]
    assert rep.parse_shapes("mixtral-8x7b", KNOWN) == (["mixtral-8x7b"], [])
    with pytest.raises(ValueError, match="no shape"):
        rep.parse_shapes(" , ", KNOWN)


def _ll(impl, shape, d, c, dtype="bfloat16", **kw):
    variant = "v1.2.1" if impl == "deepep_ll" else "default"
    return {"impl": impl, "variant": variant, "shape": shape, "dtype": dtype, "ranks": 1,
            "dispatch_kernel_us": d, "combine_kernel_us": c, "dispatch_graph_us": d, "combine_graph_us": c, **kw}


def test_ll_verdicts_met_and_not_met():
    recs = [_ll("ipc_ll", "s", 10.0, 15.0), _ll("nvshmem_ll", "s", 11.0, 15.5), _ll("deepep_ll", "s", 20.0, 22.0),
            _ll("ipc_ll", "s", 99.0, 99.0) | {"variant": "per_expert"},     # not the default: ignored
            {"impl": "ipc_ll", "shape": "s", "dtype": "bfloat16", "ranks": 2, "check": True, "wrong": 0}]
    lines, met = rep.ll_verdicts(recs)
    assert met and len(lines) == 2 and "dispatch: met" in lines[0] and "combine: met" in lines[1]
    assert "0.70" in lines[1]                           # the largest combine ratio, 15.5 / 22
    assert {r["ratio"] for r in rep.ll_ratios(recs) if r["op"] == "dispatch"} == {0.5, 0.55}
    slow = recs[:2] + [_ll("deepep_ll", "s", 20.0, 15.0)]
    lines, met = rep.ll_verdicts(slow)
    assert not met and "combine: not met" in lines[1] and "s bfloat16 nvshmem_ll kernel 1.03" in lines[1]


def test_ll_verdicts_without_deepep_and_with_a_shape_deepep_lacks():
    lines, met = rep.ll_verdicts([_ll("ipc_ll", "s", 10.0, 15.0)], "DeepEP is not importable")
    assert not met and "no comparison" in lines[0] and "not importable" in lines[0]
    lines, met = rep.ll_verdicts([_ll("ipc_ll", "s", 10.0, 15.0), _ll("deepep_ll", "s", 20.0, 22.0),
                                  _ll("ipc_ll", "t", 10.0, 15.0, dtype="float8_e4m3")])
    assert not met and "No DeepEP time for: t float8_e4m3" in lines[-1]


def test_ll_problems_name_errors_and_wrong_rows():
    recs = [_ll("deepep_ll", "h1", 1.0, 1.0, error="RuntimeError: hidden", wrong=None),
            {"impl": "ipc_ll", "shape": "s", "dtype": "bfloat16", "ranks": 2, "check": True, "wrong": 3},
            {"impl": "ipc_ll", "shape": "s", "dtype": "bfloat16", "ranks": 1, "check": True, "wrong": 0}]
    assert rep.ll_problems(recs) == ["deepep_ll h1 bfloat16 at 1 rank(s): RuntimeError: hidden",
                                     "ipc_ll s bfloat16 at 2 rank(s): wrong = 3"]


def _ex(model, phase, gemm, pct, wrong=0):
    return {"model": model, "phase": phase, "tokens": 128, "gemm": gemm, "time_us": 100.0, "roofline_us": pct,
            "bound": "hbm", "pct_of_roofline": pct, "hbm_tbps": 4.0, "tflops": 1.0, "wrong": wrong}


def test_expert_verdicts_take_the_best_correct_kernel_per_model():
    rows = [_ex("a", "decode", "grouped_mm", 66.0), _ex("a", "decode", "fused", 94.0),
            _ex("b", "decode", "fused", 99.0, wrong=2), _ex("b", "decode", "grouped_mm", 86.0),
            _ex("a", "prefill", "fused", 62.5), _ex("b", "prefill", "grouped_mm", 71.0)]
    lines, met = rep.expert_verdicts(rows)
    assert not met
    assert lines[0].startswith("**Verdict decode: met**") and "b grouped_mm 86.0%" in lines[0]
    assert lines[1].startswith("**Verdict prefill: not met**") and "a fused 62.5%" in lines[1]
    table = rep.expert_table(rows)
    assert ">= 85%: not met" in table[2] and ">= 85%: met" in table[3] and ">= 70%: met" in table[7]
    assert rep.expert_problems(rows) == ["b decode fused: wrong = 2"]
    assert rep.expert_verdicts([]) == (["**Verdict: no rows**."], False)


DEFAULTS = {"publish": "vec16", "head": "auto", "poll_delay_ns": 400}


def _px(op, p50=None, rate=None, publish="vec16", delay=400.0, status="ok", wrong=0.0):
    return {"bench": f"delivery-{op}", "op": op, "publish": publish, "head": "auto", "poll_delay_ns": delay,
            "latency_p50_us": p50, "latency_p99_us": None if p50 is None else p50 + 0.1,
            "rate_mops": rate, "wrong": wrong, "status": status}


def test_proxy_verdicts_use_the_delivery_defaults():
    rows = [_px("latency", p50=1.9), _px("rate", rate=157.9), _px("rate", rate=90.0, publish="fence")]
    lines, met = rep.proxy_verdicts(rows, DEFAULTS)
    assert met and "p50 1.90 us" in lines[0] and "157.9 M" in lines[1]   # fence's 90 is not the default
    lines, met = rep.proxy_verdicts([_px("latency", p50=3.5), _px("rate", rate=99.0)], DEFAULTS)
    assert not met and "latency: not met" in lines[0] and "rate: not met" in lines[1]
    lines, met = rep.proxy_verdicts([_px("latency", status="skipped")], DEFAULTS)
    assert not met and "no row" in lines[0] and "no row" in lines[1]
    table = rep.proxy_table(rows, DEFAULTS)
    assert "| 400 |" in table[2] and "| yes | 0 | ok |" in table[2] and "|  | 0 | ok |" in table[4]


def test_proxy_problems():
    rows = [_px("latency", status="error") | {"error": "boom"}, _px("rate", rate=1.0, wrong=2.0)]
    assert rep.proxy_problems(rows) == ["delivery-latency vec16/auto/400.0: error: boom",
                                        "delivery-rate vec16/auto/400.0: wrong = 2.0"]


def test_exit_status_and_header():
    assert rep.exit_status({"ll": [], "proxy": []}, {"ll": False}, strict=False) == (0, [])
    assert rep.exit_status({"ll": []}, {"ll": False}, strict=True) == (1, ["ll: a target was not met"])
    assert rep.exit_status({"experts": ["x: wrong = 1"]}, {}, strict=False) == (1, ["experts: x: wrong = 1"])
    head = rep.header({"gpu": "1x NVIDIA H200", "driver": "580", "date": "2026-12-03 20:00 UTC",
                       "commit": "abc1234", "torch": "2.11"}, ["ll", "proxy"], quick=True)
    assert "commit abc1234" in head[2] and "(--quick)" in head[2]
    assert head[6] == "| 1x NVIDIA H200 | 580 | 2.11 | - | - | - | - |"


def test_expert_rows_from_a_run_cut_short():
    text = ("# 2026-12-03 17:50 UTC\n"
            "model\ttokens\tpairs\tgemm\ttime_us\troofline_us\tpct_of_roofline\tbound\twrong\n"
            "deepseek-v3\t128\t1024\tgrouped_mm\t6905.0\t4630.0\t67.1\thbm\t0 \n"
            "deepseek-v3\t128\t1024\tfused\t4823.0\t4630.0\t96.0\thbm\t0 {'gate_up@1024': 'BM16-BN32'}\n"
            "qwen3-235b-a22b\t4096\n"
            "qwen3-235b-a22b\t4096\t32768\tfused\t2905\t1251.0\t43.0\tcompute\t2 {}\n")
    rows = rep.expert_rows_from_output(text, {"prefill": 4096, "decode": 128})
    assert [(r["model"], r["phase"], r["gemm"], r["pct_of_roofline"], r["wrong"]) for r in rows] == [
        ("deepseek-v3", "decode", "grouped_mm", 67.1, 0), ("deepseek-v3", "decode", "fused", 96.0, 0),
        ("qwen3-235b-a22b", "prefill", "fused", 43.0, 2)]   # a half-printed line is left out
