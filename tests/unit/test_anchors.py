"""benchmarks/anchors.py on CPU: the report from given records (every section, one not run), exit
status, and its argument checks."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def anchors():
    pytest.importorskip("torch")   # moe_ll_workers imports it (no GPU needed)
    spec = importlib.util.spec_from_file_location("anchors", ROOT / "benchmarks" / "anchors.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ll(impl, shape, dtype, d, c):
    return {"impl": impl, "variant": "v1.2.1" if impl == "deepep_ll" else "default", "shape": shape,
            "dtype": dtype, "ranks": 1, "dispatch_kernel_us": d, "combine_kernel_us": c,
            "dispatch_graph_us": d + 1, "combine_graph_us": c + 1, "dispatch_api_us": d + 30,
            "combine_api_us": c + 30,
            **({} if impl == "deepep_ll" else {"ll_variant": "dispatch=plain,combine=rows"})}


def _results():
    ll = [_ll("ipc_ll", "deepseek-v3", "bfloat16", 20.9, 15.5),
          _ll("nvshmem_ll", "deepseek-v3", "bfloat16", 20.4, 15.4),
          _ll("deepep_ll", "deepseek-v3", "bfloat16", 21.0, 22.2) | {"wrong": 0, "calc_diff": 1e-15},
          {"impl": "ipc_ll", "variant": "default", "shape": "deepseek-v3", "dtype": "bfloat16", "ranks": 2,
           "check": True, "wrong": 0, "calc_diff": 1e-15}]
    experts = [{"model": "deepseek-v3", "phase": "decode", "tokens": 128, "gemm": "fused", "time_us": 4927.0,
                "roofline_us": 4630.0, "bound": "hbm", "pct_of_roofline": 94.0, "hbm_tbps": 4.51, "tflops": 18.0,
                "wrong": 0}]
    return {"ll": {"records": ll, "problems": [], "deepep": "v1.2.1 at /tmp/deepep", "deepep_ran": True},
            "experts": {"records": experts, "problems": []}}


def test_report_has_every_section_and_the_verdicts(anchors):
    info = {"gpu": "1x NVIDIA H200", "driver": "580.159.04", "date": "2026-12-03 20:00 UTC", "commit": "abc1234"}
    text, code, reasons = anchors.render(info, ["ll", "experts", "proxy"], True, _results(), False,
                                         {"proxy": "less than 15 s of --budget-s 20 left"})
    assert "commit abc1234" in text and "| 1x NVIDIA H200 | 580.159.04 |" in text
    assert "**Verdict combine: met**" in text and "**Verdict dispatch: met**" in text
    assert "| deepseek-v3 | bfloat16 | 20.9 / 15.5 | 20.4 / 15.4 | 21.0 / 22.2 | 0.70, 0.69 |" in text
    assert "dispatch=plain,combine=rows" in text
    api = text[text.index("### API: one call"):]   # the API table: ours vs DeepEP per call, host clock
    assert "| deepseek-v3 | bfloat16 | 50.9 / 45.5 | 50.4 / 45.4 | 51.0 / 52.2 |" in api
    assert "**Verdict decode: met**" in text and ">= 85%: met" in text
    assert "Not run: less than 15 s" in text
    assert code == 1 and reasons == ["proxy: not run: less than 15 s of --budget-s 20 left"]
    assert text.index("## Low-latency") < text.index("## Expert") < text.index("## Proxy")


def test_wrong_rows_fail_and_strict_fails_a_missed_target(anchors):
    res = _results()
    res["experts"]["records"][0]["pct_of_roofline"] = 60.0
    _, code, reasons = anchors.render({}, ["ll", "experts"], False, res, False, {})
    assert (code, reasons) == (0, [])                   # a missed target is reported, not an error
    _, code, reasons = anchors.render({}, ["ll", "experts"], False, res, True, {})
    assert code == 1 and reasons == ["experts: a target was not met"]
    res["ll"]["problems"] = ["ipc_ll deepseek-v3 bfloat16 at 2 rank(s): wrong = 3"]
    _, code, reasons = anchors.render({}, ["ll"], False, res, False, {})
    assert code == 1 and "wrong = 3" in reasons[0]


@pytest.mark.parametrize("argv, why", [(["--shapes", "h100-e8"], "multiple of 128"),
                                       (["--sections", "ll,gpu"], "unknown")])
def test_bad_arguments_exit_2(anchors, argv, why, capsys):
    with pytest.raises(SystemExit) as exc:
        anchors.main(argv)
    assert exc.value.code == 2 and why in capsys.readouterr().err


def test_commit_names_this_tree_or_the_override(anchors, monkeypatch):
    monkeypatch.setenv("COMMBENCH_COMMIT", "abc1234")
    assert anchors.ll.commit() == "abc1234"
    monkeypatch.delenv("COMMBENCH_COMMIT")
    monkeypatch.setattr(anchors.ll, "_sh", lambda cmd: "/elsewhere" if "--show-toplevel" in cmd else "9694e9f")
    assert anchors.ll.commit() == "unknown"   # a copy inside another checkout: not that one's HEAD
    monkeypatch.setattr(anchors.ll, "_sh", lambda cmd: str(ROOT) if "--show-toplevel" in cmd else "7b691ae")
    assert anchors.ll.commit() == "7b691ae"


def _ep_rows():
    base = {"op": "dispatch", "size_bytes": 1835008, "hidden": 7168}
    return [base | {"backend": "ipc", "status": "ok", "time_us": 80.0, "api_us": 120.0, "kernel_only_us": 70.0,
                    "wrong": 0, "tokens_per_rank": 128},
            base | {"backend": "deepep", "status": "ok", "time_us": 100.0, "api_us": 150.0, "kernel_only_us": 90.0,
                    "wrong": 0, "tokens_per_rank": 128},
            base | {"backend": "uccl_ep", "status": "skipped",
                    "reason": "rank 0: UCCL-EP could not start here: ValueError: Duplicate physical GPU rank"}]


def test_ep_section_puts_ours_and_uccl_ep_beside_deepep(anchors):
    res = {"ep": {"records": _ep_rows(), "problems": [], "shared": False, "ranks": 8,
                  "uccl_ep": "UCCL da914a2's wrapper at /tmp/uccl-ep"}}
    text, code, reasons = anchors.render({}, ["ep"], False, res, False, {})
    assert "8 ranks, one per GPU" in text and "UCCL-EP: UCCL da914a2's wrapper" in text
    assert "| dispatch | 128 | ipc | ok | 80.0 | 120.0 | 70.0 | 0.80 | 0 |  |" in text
    assert "| dispatch | 128 | deepep | ok | 100.0 | 150.0 | 90.0 | 1.00 | 0 |  |" in text
    # a skipped row: its tokens from size and hidden, no times, the library's words as the reason
    assert "| dispatch | 128 | uccl_ep | skipped | - | - | - | - | - | rank 0: UCCL-EP could not start" in text
    table = text[text.index("## Normal-mode"):]
    assert table.index("| ipc |") < table.index("| deepep |") < table.index("| uccl_ep |")
    assert code == 0 and reasons == [] and "Targets: none in these sections." in text   # times side by side, no target


def test_ep_failed_or_wrong_rows_are_problems_and_skipped_ones_are_not(anchors):
    rep = __import__("anchors_report")
    rows = _ep_rows() + [{"op": "combine", "backend": "uccl_ep", "size_bytes": 8, "status": "failed",
                          "error": "signal 11"},
                         {"op": "combine", "backend": "ipc", "size_bytes": 8, "status": "ok", "wrong": 3.0}]
    assert rep.ep_problems(rows) == ["combine uccl_ep 8 B: failed: signal 11", "combine ipc 8 B: wrong = 3"]


@pytest.mark.parametrize("gpus, want", [(1, ["--set", "ranks=2", "--share-gpu"]), (4, ["--set", "ranks=4"])])
def test_ep_runs_every_gpu_or_two_ranks_sharing_the_one(anchors, monkeypatch, tmp_path, gpus, want):
    run = __import__("anchors_sections")
    seen = {}

    def fake(suite, out, args, timeout_s):
        seen["args"] = args
        return _ep_rows(), []

    monkeypatch.setattr(run, "_run_suite", fake)
    res = run.run_ep(tmp_path, False, 60, gpus)
    assert seen["args"] == want and res["shared"] is (gpus < 2) and res["problems"] == []


def _ceiling():
    rows = [{"model": "qwen3-235b-a22b", "phase": "prefill", "tokens": 4096, "path": p, "time_us": t,
             "tflops": 1.0, "hbm_tbps": 1.0, "pct_of_roofline": pct, "pct_of_ceiling": poc, "wrong": 0}
            for p, t, pct, poc in (("grouped_mm", 2927.2, 54.7, 65.1), ("fused", 2456.6, 65.2, 77.6),
                                   ("dense_cublas", 1905.8, 84.0, None), ("weight_read", 1590.4, 100.7, None))]
    summary = {"model": "qwen3-235b-a22b", "phase": "prefill", "roofline_us": 1601.5, "bound": "hbm",
               "hbm_us": 1601.5, "compute_us": 1155.5, "ceiling_us": 1905.8, "limited_by": "dense_cublas",
               "ceiling_pct": 84.0, "gpu": "NVIDIA H100 80GB HBM3"}
    return {"records": rows, "summaries": [summary], "problems": []}


def test_ceiling_section_says_how_far_the_kernel_is_from_what_the_card_allows(anchors):
    text, code, _ = anchors.render({}, ["experts", "ceiling"], False, {**_results(), "ceiling": _ceiling()},
                                   False, {})
    sec = text[text.index("## Expert step at prefill"):]
    assert ("**qwen3-235b-a22b prefill: ceiling 84.0 % of the roofline (set by dense_cublas); best grouped "
            "kernel fused 65.2 % (77.6 % of the ceiling); a 70 % target is within the ceiling.**") in sec
    assert "| qwen3-235b-a22b | prefill | 1601.5 (hbm) | 1601.5 / 1155.5 | 1905.8 (dense_cublas) | 84.0 |" in sec
    assert "| qwen3-235b-a22b | prefill | 4096 | weight_read | 1590.4 |" in sec
    assert code == 0 and text.index("## Expert kernel") < text.index("## Expert step at prefill")
    wrong = _ceiling()
    wrong["records"][1]["wrong"] = 5
    wrong["problems"] = ["ceiling: qwen3-235b-a22b prefill fused: 5 wrong"]
    text, code, reasons = anchors.render({}, ["ceiling"], False, {"ceiling": wrong}, False, {})
    assert code == 1 and "fused: 5 wrong" in reasons[0]
    assert "best grouped kernel grouped_mm 54.7 %" in text   # a wrong row is never the best


@pytest.mark.parametrize("rc, writes, want", [(0, True, []),
                                              (124, False, ["exit 124 (timed out), 0 model(s) measured"])])
def test_ceiling_section_runs_the_script_and_a_cut_run_is_a_problem(anchors, monkeypatch, tmp_path, rc, writes,
                                                                    want):
    import json

    run = __import__("anchors_sections")

    def fake(cmd, timeout_s, log=None):
        assert cmd[1].endswith("moe_expert_ceiling.py") and cmd[cmd.index("--iters") + 1] == "20"
        if writes:
            out = cmd[cmd.index("--json") + 1]
            c = _ceiling()
            with open(out, "w") as f:
                json.dump({"rows": c["records"], "summaries": c["summaries"]}, f)
        return rc

    monkeypatch.setattr(run, "_run", fake)
    res = run.run_ceiling(tmp_path, False, 60)
    assert [p.split(": ", 1)[1] for p in res["problems"]] == want
    assert len(res["summaries"]) == (1 if writes else 0)
