"""Print a proxy run folder's rows, one line each: the delivery settings and what they gave.

    python3 tests/gpu/proxy_rows.py RUN_DIR
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

COLUMNS = ("bench", "op", "executor", "publish", "head", "poll_delay_ns", "proxy_threads", "num_ctas",
           "time_us", "latency_p50_us", "latency_p99_us", "rate_mops", "wrong", "status")


def main(run_dir: str) -> int:
    path = Path(run_dir) / "results.csv"
    if not path.exists():
        print(f"no {path}")
        return 1
    with path.open() as f:
        rows = list(csv.DictReader(f))
    print("\t".join(COLUMNS))
    for row in rows:
        cells = []
        for col in COLUMNS:
            value = row.get(col, "")
            try:
                value = f"{float(value):.3f}" if "." in value else value
            except ValueError:
                pass
            cells.append(value)
        reason = row.get("error") or row.get("reason") or ""
        print("\t".join(cells), reason[:120])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
