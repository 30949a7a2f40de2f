"""Print a run folder's rows, one line each, with the columns a reader checks a family's targets on.

    python3 tests/gpu/print_rows.py RUN_DIR copy|moe|proxy

copy: every measured row with its bound (bound_gbps, pct_of_bound), then the skipped rows by reason
and the largest pct_of_bound; moe: the GEMM path and the expert step against its roofline; proxy:
the delivery settings and what they gave.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from commbench.analysis.bounds import with_bounds
from commbench.runfolder.reader import load_run

COLUMNS = {
    "copy": ("bench", "op", "engine", "memory", "gpu", "peer", "size_bytes", "time_us", "algbw_gbps",
             "busbw_gbps", "bound_gbps", "bound_link", "pct_of_bound", "wrong", "sm_ctas", "status"),
    "moe": ("model", "phase", "gemm", "grouped_gemm", "layer_us", "expert_us", "expert_roofline_us",
            "pct_of_roofline", "dispatch_us", "combine_us", "wrong", "status"),
    "proxy": ("bench", "op", "executor", "publish", "head", "poll_delay_ns", "proxy_threads", "num_ctas",
              "time_us", "latency_p50_us", "latency_p99_us", "rate_mops", "wrong", "status"),
}


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)[:16]


def main(run_dir: str, kind: str) -> int:
    run = load_run(run_dir)
    df = with_bounds(run.results, run.meta) if kind == "copy" else run.results
    if kind == "copy":
        df = df[df["status"].astype(str) != "skipped"]
    cols = [c for c in COLUMNS[kind] if c in df.columns]
    print("\t".join(cols) + "\treason")
    for _, r in df.iterrows():
        reason = r.get("error") if isinstance(r.get("error"), str) and r.get("error") else r.get("reason", "")
        print("\t".join(_cell(r[c]) for c in cols) + "\t" + str(reason if reason == reason else "")[:160])
    if kind == "copy":
        skipped = run.results[run.results["status"].astype(str) == "skipped"]
        for reason, n in skipped.groupby("reason").size().items():
            print(f"skipped x{n}: {reason[:200]}")
        pct = df["pct_of_bound"].dropna()
        print(f"rows {len(run.results)}, measured {len(df)}, max pct_of_bound {pct.max() if len(pct) else 'n/a'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in COLUMNS:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
