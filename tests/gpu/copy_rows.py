"""Print a copy run's rows with their bounds (the columns a reader checks the targets on).

    python3 tests/gpu/copy_rows.py RUN_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from commbench.analysis.bounds import with_bounds
from commbench.runfolder.reader import load_run

COLUMNS = ("bench", "op", "engine", "memory", "gpu", "peer", "size_bytes", "time_us", "algbw_gbps", "busbw_gbps",
           "bound_gbps", "bound_link", "pct_of_bound", "wrong", "sm_ctas", "status")


def main(path: str) -> int:
    run = load_run(path)
    df = with_bounds(run.results, run.meta)
    df = df[df["status"].astype(str) != "skipped"]
    cols = [c for c in COLUMNS if c in df.columns]
    print("\t".join(cols) + "\treason")
    for _, r in df.iterrows():
        print("\t".join(str(r[c])[:12] for c in cols) + "\t" + str(r.get("reason", ""))[:200])
    skipped = run.results[run.results["status"].astype(str) == "skipped"]
    for reason, n in skipped.groupby("reason").size().items():
        print(f"skipped x{n}: {reason[:200]}")
    pct = df["pct_of_bound"].dropna()
    print(f"rows {len(run.results)}, measured {len(df)}, max pct_of_bound {pct.max() if len(pct) else 'n/a'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
