"""How `commbench compare` grows with the number of points: time and peak memory at 1k, 10k, 100k.

Builds, from one real run folder (e.g. a quickstart run), a pair of synthetic run folders per size:
the run's rows repeated with variant v0, v1, ... until N points, each with 10 iterations on 2 ranks
(N x 20 samples), times drawn around 10 us + size / 1 GB/s with a 5% spread; then runs
`commbench compare BASE NEW --fail-above 5 --json FILE` under `/usr/bin/time` (wall, CPU, peak
resident memory) and prints a Markdown table with the growth exponent between sizes
(log(t2/t1) / log(n2/n1): 1 is linear). The folders go under --work (git-ignored results/ by
default). benchmarks/fleet_scale.py times report and accept too; this one is compare's alone.

    .venv/bin/python benchmarks/compare_scale.py results/<a quickstart run> --out docs/measurements/FILE.md
"""
from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from machine_load import uptime  # benchmarks/ (the script's own folder)

ROOT = Path(__file__).resolve().parent.parent
COMMBENCH = ROOT / ".venv" / "bin" / "commbench"
SIZES = (1_000, 10_000, 100_000)
ITERS, RANKS = 10, 2
KEEP = ("run.json", "suite.yaml", "plan.json")


def build(src: Path, n_points: int, out: Path, seed: int = 0) -> None:
    """BASE and NEW folders of ``n_points`` points under ``out``."""
    rows = pd.read_csv(src / "results.csv")
    copies = -(-n_points // len(rows))
    rng = np.random.default_rng(seed)
    for side in ("base", "new"):
        folder = out / side
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for name in KEEP:
            if (src / name).exists():
                shutil.copy(src / name, folder / name)
        df = pd.concat([rows.assign(variant=f"v{i}", case_id=rows["case_id"].astype(str) + f"-{i}")
                        for i in range(copies)]).head(n_points)
        t = (10.0 + df["size_bytes"].to_numpy(dtype=float) / 1000.0) * np.exp(rng.normal(0, 0.05, len(df)))
        df = df.assign(time_us=t, status="ok", reason="")
        df.to_csv(folder / "results.csv", index=False)
        per = ITERS * RANKS
        it = np.arange(ITERS)
        pd.DataFrame({"case_id": np.repeat(df["case_id"].to_numpy(), per),
                      "rank": np.tile(np.repeat(np.arange(RANKS), ITERS), len(df)),
                      "host": "synthetic", "gpu": "cpu",
                      "iteration": np.tile(np.tile(it, RANKS), len(df)),
                      "time_us": np.repeat(t, per) * np.exp(rng.normal(0, 0.05, len(df) * per))}
                     ).to_csv(folder / "samples.csv", index=False)


def timed_compare(out: Path) -> dict:
    argv = ["/usr/bin/time", "-f", "TIME %e %U %S %M", str(COMMBENCH), "compare", str(out / "base"),
            str(out / "new"), "--fail-above", "5", "--json", str(out / "compare.json")]
    proc = subprocess.run(argv, capture_output=True, text=True)
    m = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", proc.stderr)
    if not m:
        raise SystemExit(f"no timing from {' '.join(argv)}: {proc.stderr[-1500:]}")
    wall, user, sys_s, kb = float(m[1]), float(m[2]), float(m[3]), int(m[4])
    return {"exit": proc.returncode, "wall_s": wall, "cpu_s": user + sys_s, "peak_mb": kb / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a real run folder whose rows are repeated")
    ap.add_argument("--work", type=Path, default=ROOT / "results" / "compare-scale")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file to write (default: print)")
    args = ap.parse_args()
    before = uptime()
    lines = ["| points | samples | wall s | CPU s | peak MB | exit | growth of CPU time |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    prev = None
    for n in SIZES:
        build(args.run, n, args.work / f"{n}")
        r = timed_compare(args.work / f"{n}")
        growth = f"{math.log(r['cpu_s'] / prev[1]) / math.log(n / prev[0]):.2f}" if prev else ""
        lines.append(f"| {n:,} | {n * ITERS * RANKS:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['peak_mb']:.0f} | {r['exit']} | {growth} |")
        prev = (n, r["cpu_s"])
    after = uptime()
    text = "\n".join([f"`commbench compare` at fleet size (benchmarks/compare_scale.py, rows of {args.run.name})",
                      "", f"uptime before: `{before}`", f"uptime after: `{after}`", "", *lines]) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
