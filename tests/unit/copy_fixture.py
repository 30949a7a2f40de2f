"""A copy family run folder on the 8x H200 NVSwitch fixture node (tests/fixtures/links), written
into a test's tmp_path: h2d/d2h/d2d on every GPU and every ordered GPU pair p2p and bidir, both
engines, with the numbers a healthy node gives and chosen pairs (or a GPU) made slow."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

LINKS = Path(__file__).resolve().parents[1] / "fixtures" / "links" / "8x-h200-nvswitch.json"
GIB = 1 << 30
PAIR_BYTES = 512 << 20
HEALTHY_GBPS = {"h2d": 55.5, "d2h": 55.3, "d2d": 2105.0, "p2p": 380.0, "bidir": 740.0}


def _row(op, engine, gpu, peer, size, gbps, suite="copy"):
    time_us = size / (gbps * 1e3)
    return {"suite": suite, "bench": "pairs" if peer >= 0 else "host", "case_id": f"{op}{engine}{gpu}{peer}{size}",
            "family": "copy", "op": op, "backend": "cuda", "variant": "default", "dtype": "int32",
            "size_bytes": size, "count": size // 4, "world_size": 1, "num_nodes": 1, "ranks_per_node": 1,
            "in_place": "", "warmup": 3, "iters": 10, "timing": "events", "time_us": round(time_us, 3),
            "time_us_min": round(time_us, 3), "time_us_p90": round(time_us, 3), "time_us_max": round(time_us, 3),
            "algbw_gbps": gbps, "busbw_gbps": gbps, "wrong": 0, "status": "ok", "reason": "",
            "log": "logs/launch-0.log",
            "engine": engine, "memory": "pinned", "gpu": gpu, "peer": peer, "buffer_span_bytes": 256 << 20,
            "sm_ctas": 528 if engine == "sm" else "", "ranks_per_gpu": 1}


def copy_rows(slow_pairs: dict | None = None, gpus: int = 8) -> list[dict]:
    """Every row of a healthy node; ``slow_pairs`` {(gpu, peer): factor} scales those pairs' p2p."""
    slow_pairs = slow_pairs or {}
    rows = []
    for engine in ("ce", "sm"):
        for gpu in range(gpus):
            for op in ("h2d", "d2h", "d2d"):
                rows.append(_row(op, engine, gpu, -1, GIB, HEALTHY_GBPS[op]))
            for peer in range(gpus):
                if peer == gpu:
                    continue
                for op in ("p2p", "bidir"):
                    factor = slow_pairs.get((gpu, peer), 1.0) if op == "p2p" else 1.0
                    rows.append(_row(op, engine, gpu, peer, PAIR_BYTES, round(HEALTHY_GBPS[op] * factor, 2)))
    return rows


def write_copy_run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    pd.DataFrame(columns=["case_id", "rank", "host", "gpu", "iteration", "time_us"]).to_csv(folder / "samples.csv",
                                                                                           index=False)
    meta = {"schema_version": 1, "suite": "copy", "started_utc": "2026-12-03T12:00:00Z",
            "hosts": ["fixture-8x-h200-nvswitch"], "hostname": "fixture-8x-h200-nvswitch",
            "links": json.loads(LINKS.read_text())["links"],
            "param_columns": {"copy": ["engine", "memory", "gpu", "peer", "buffer_span_bytes", "sm_ctas"]}}
    (folder / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder
