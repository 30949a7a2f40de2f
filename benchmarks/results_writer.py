"""Cost of storing one row in a run folder as the folder grows (the per-Case overhead of results.py).

    python benchmarks/results_writer.py [ROWS]

Appends ROWS typical rows (collectives-like, plus a few family columns) to a fresh run folder
and prints the mean time per append over each stretch, then checks that results.csv holds
every row.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commbench.runfolder import COLUMNS, RunFolder  # noqa: E402
from commbench.runfolder.reader import load  # noqa: E402


def row(i: int) -> dict:
    r = {c: None for c in COLUMNS}
    r.update(suite="bench", bench="b", case_id=f"case-{i:06d}", family="collectives", op="all_reduce",
             backend="nccl", variant="default", dtype="float32", size_bytes=8 << (i % 30), count=2 << (i % 30),
             world_size=8, num_nodes=1, ranks_per_node=8, in_place=False, warmup=5, iters=20,
             timing="events", time_us=12.5 + i, time_us_min=12.0, time_us_p90=13.0, time_us_max=14.0,
             algbw_gbps=100.0, busbw_gbps=175.0, wrong=0, status="ok", reason="", log="logs/launch-0.log",
             nccl_algo="Ring", nccl_proto="Simple", tokens_per_s=None)
    if i % 500 == 7:
        r[f"extra_{i}"] = i   # a family adding a new column now and then
    return r


def main(n: int) -> None:
    marks = sorted({m for m in (100, 1000, 2000, 5000, 10000, n) if m <= n})
    with tempfile.TemporaryDirectory() as tmp:
        folder = RunFolder(Path(tmp) / "run")
        folder.create(resume=False)
        done, t_prev, start = 0, time.perf_counter(), time.perf_counter()
        for m in marks:
            while done < m:
                folder.append_row(row(done))
                done += 1
            t = time.perf_counter()
            print(f"rows {m:6d}: {1e3 * (t - t_prev) / max(1, m - (marks[marks.index(m) - 1] if marks.index(m) else 0)):8.3f} ms per append "
                  f"(total {t - start:7.2f} s)")
            t_prev = t
        df = load(Path(tmp) / "run")
        assert len(df) == n and df["case_id"].is_unique, (len(df), n)
        print(f"results.csv: {len(df)} rows, {len(df.columns)} columns: ok")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
