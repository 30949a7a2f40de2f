"""Print a moe layer run folder's rows: the GEMM path, the expert step against its roofline.

    python3 tests/gpu/moe_rows.py RUN_DIR
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

COLUMNS = ("model", "phase", "gemm", "grouped_gemm", "layer_us", "expert_us", "expert_roofline_us",
           "pct_of_roofline", "dispatch_us", "combine_us", "wrong", "status")


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
                value = f"{float(value):.1f}" if "." in value else value
            except ValueError:
                pass
            cells.append(value)
        print("\t".join(cells), (row.get("error") or row.get("reason") or "")[:160])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
