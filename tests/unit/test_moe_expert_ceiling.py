"""benchmarks/moe_expert_ceiling.py: the ceiling arithmetic and its report (no GPU needed)."""
import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "moe_expert_ceiling", Path(__file__).resolve().parents[2] / "benchmarks" / "moe_expert_ceiling.py")
ceil = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ceil)


def test_the_slower_half_sets_the_ceiling():
    got = ceil.ceiling(1440.0, {"dense_cublas": 1800.0, "weight_read": 1600.0, "fused": 2240.0})
    assert got["limited_by"] == "dense_cublas" and got["ceiling_us"] == 1800.0
    assert got["ceiling_pct"] == pytest.approx(80.0)
    got = ceil.ceiling(1440.0, {"dense_cublas": 1500.0, "weight_read": 1600.0})
    assert got["limited_by"] == "weight_read" and got["ceiling_pct"] == pytest.approx(90.0)


def test_no_halves_measured_means_no_ceiling():
    assert ceil.ceiling(1440.0, {"fused": 2000.0}) == {"ceiling_us": None, "ceiling_pct": None, "limited_by": None}
    assert ceil.pct_of_ceiling(None, 2000.0) is None
    assert ceil.pct_of_ceiling(1800.0, 2250.0) == pytest.approx(80.0)


def test_report_names_the_card_and_every_row():
    rows = [{"model": "qwen3-235b-a22b", "phase": "prefill", "tokens": 4096, "path": p, "time_us": t,
             "tflops": 1.0, "hbm_tbps": 1.0, "pct_of_roofline": 50.0, "pct_of_ceiling": None, "wrong": 0}
            for p, t in (("fused", 2240.0), ("dense_cublas", 1800.0), ("weight_read", 1600.0))]
    summary = {"model": "qwen3-235b-a22b", "phase": "prefill", "roofline_us": 1440.0, "bound": "hbm",
               "hbm_us": 1440.0, "compute_us": 1250.0, "ceiling_us": 1800.0, "limited_by": "dense_cublas",
               "ceiling_pct": 80.0, "gpu": "NVIDIA H100 80GB HBM3"}
    text = ceil.markdown(rows, [summary], "2026-12-07 12:00")
    assert "NVIDIA H100 80GB HBM3" in text and text.count("| qwen3-235b-a22b | prefill | 4096 |") == 3
    assert "1800.0 (dense_cublas) | 80.0 |" in text
