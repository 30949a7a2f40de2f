"""How often `commbench compare --fail-above 5` cries wolf, and how often it catches a real slowdown.

Runs `commbench run suites/quickstart.yaml` on this machine, many times, into a pool of run folders,
then compares them in pairs and prints a Markdown table (commit it under docs/measurements/):

- identical single runs: repeat-k of one `--repeat 3` set against repeat-k of the next set
  (back-to-back runs of the same tree: anything compare calls worse is a false alarm);
- identical `--repeat 3` sets: set 2i against set 2i+1;
- a real slowdown: an identical set against a set run under ``taskset -c 0`` (both ranks on one
  core: every op pays a context switch per message; `--slow-cores` changes the core list), each
  side `--repeat 3`, and each slowed run singly against an identical single run.

The sets are run in the order A A S A A S ... (S slowed), so a load that drifts over the hour weighs
on every kind alike. `uptime` is recorded before and after every `commbench run`. Collecting is
resumable: a set whose folder is complete is kept (``--pool`` to keep the runs elsewhere).

    .venv/bin/python benchmarks/compare_false_alarm.py --sets 20 --slow-sets 10 \\
        --out docs/measurements/2026-12-07-compare-false-alarm.md

Per pair it calls `commbench compare BASE NEW --fail-above 5 --json` and counts exit 1 (a
regression claimed), 3 (inconclusive: points it cannot tell) and 0 (pass). A false alarm is exit
1 on identical runs; a slowdown is caught when the pair exits 1 (a point judged worse)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from machine_load import uptime  # benchmarks/ (the script's own folder)

ROOT = Path(__file__).resolve().parent.parent
COMMBENCH = ROOT / ".venv" / "bin" / "commbench"
SUITE = ROOT / "suites" / "quickstart.yaml"
REPEATS = 3
FAIL_ABOVE_PCT = 5.0
CANT = "can't tell"


def _complete(folder: Path) -> bool:
    return all((folder / f"repeat-{k}" / "results.csv").is_file() for k in range(1, REPEATS + 1))


def _plan(sets: int, slow_sets: int) -> list[str]:
    """Set names in the order they run: two identical sets, then one slowed, while both last."""
    order, a, s = [], 0, 0
    while a < sets or s < slow_sets:
        for _ in range(2):
            if a < sets:
                order.append(f"same-{a:02d}")
                a += 1
        if s < slow_sets:
            order.append(f"slow-{s:02d}")
            s += 1
    return order


def collect(pool: Path, sets: int, slow_sets: int, slow_cores: str, log) -> None:
    pool.mkdir(parents=True, exist_ok=True)
    for name in _plan(sets, slow_sets):
        folder = pool / name
        if _complete(folder):
            continue
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        argv = [str(COMMBENCH), "run", str(SUITE), "--repeat", str(REPEATS), "--out", str(folder)]
        if name.startswith("slow"):
            argv = ["taskset", "-c", slow_cores, *argv]
        before, t0 = uptime(), time.time()
        proc = subprocess.run(argv, capture_output=True, text=True)
        entry = {"set": name, "argv": argv, "rc": proc.returncode, "wall_s": round(time.time() - t0, 1),
                 "uptime_before": before, "uptime_after": uptime(),
                 "utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        log.write(json.dumps(entry) + "\n")
        log.flush()
        print(f"{name}: rc {proc.returncode}, {entry['wall_s']} s; {entry['uptime_after']}", flush=True)
        if proc.returncode not in (0, 1):
            sys.stderr.write(proc.stderr[-2000:])


def _compare(base: list[Path], new: list[Path]) -> dict:
    """`commbench compare BASE NEW --fail-above 5 --json -` (several folders per side with `vs`)."""
    sides = [*map(str, base), *(["vs"] if len(base) + len(new) > 2 else []), *map(str, new)]
    argv = [str(COMMBENCH), "compare", *sides, "--fail-above", f"{FAIL_ABOVE_PCT:g}", "--json", "-"]
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{' '.join(argv)} gave no JSON (exit {proc.returncode}): {proc.stderr[-1500:]}") from None
    if doc["exit_status"] != proc.returncode:
        raise SystemExit(f"exit status {proc.returncode} but the JSON says {doc['exit_status']}: {argv}")
    doc["wall_s"] = time.time() - t0
    return doc


def _runs(pool: Path, name: str) -> list[Path]:
    return [pool / name / f"repeat-{k}" for k in range(1, REPEATS + 1)]


def _finished(pool: Path, prefix: str, count: int) -> list[str]:
    """Sets whose `commbench run` has ended (logged in runs.jsonl) with every repeat stored."""
    log = pool / "runs.jsonl"
    done = {json.loads(x)["set"] for x in log.read_text().splitlines() if x.strip()} if log.exists() else set()
    return [f"{prefix}-{i:02d}" for i in range(count)
            if f"{prefix}-{i:02d}" in done and _complete(pool / f"{prefix}-{i:02d}")]


def _pairs(pool: Path, sets: int, slow_sets: int) -> dict[str, list[tuple[list[Path], list[Path]]]]:
    same, slow = _finished(pool, "same", sets), _finished(pool, "slow", slow_sets)
    twins = list(zip(same[0::2], same[1::2]))
    kinds = {
        "identical, single runs": [([a], [b]) for x, y in twins for a, b in zip(_runs(pool, x), _runs(pool, y))],
        "identical, --repeat 3": [(_runs(pool, x), _runs(pool, y)) for x, y in twins],
        # each slowed set against the identical set run just before it (A A S: the second A)
        "taskset slowdown, --repeat 3": [(_runs(pool, _before(pool, s, same)), _runs(pool, s)) for s in slow],
        "taskset slowdown, single runs": [([_runs(pool, _before(pool, s, same))[0]], [_runs(pool, s)[0]])
                                          for s in slow],
    }
    return kinds


def _before(pool: Path, slow: str, same: list[str]) -> str:
    i = int(slow.split("-")[1])
    return same[min(len(same) - 1, 2 * i + 1)]


def _true_slowdown(pool: Path, slow_sets: list[str], same_sets: list[str]) -> dict:
    """Per point the ratio of the medians over every slowed and every identical run (the best
    this pool knows of the real effect of taskset)."""
    import pandas as pd

    def medians(names):
        frames = [pd.read_csv(p / "results.csv") for n in names for p in _runs(pool, n)]
        df = pd.concat(frames)
        key = ["op", "backend", "in_place", "size_bytes"]
        return df[df["status"] == "ok"].groupby(key)["time_us"].median()

    ratio = (medians(slow_sets) / medians(same_sets)).dropna()
    return {tuple(k): float(v) for k, v in ratio.items()}


def judge(pool: Path, sets: int, slow_sets: int) -> str:
    kinds = _pairs(pool, sets, slow_sets)
    lines = [f"# compare false alarms and power on this machine ({platform.node()}, {os.cpu_count()} CPUs)", "",
             f"`commbench compare BASE NEW --fail-above {FAIL_ABOVE_PCT:g}` on pairs of `commbench run "
             "suites/quickstart.yaml` (152 points), made by benchmarks/compare_false_alarm.py "
             f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC). Exit 1: a regression claimed; 3: inconclusive; "
             "0: pass.", "",
             "| pairs | n | exit 1 | exit 3 | exit 0 | points worse (median, max) | can't tell (median) | "
             "compare wall s (median) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    detail = []
    for kind, pairs in kinds.items():
        docs = [_compare(b, n) for b, n in pairs]
        if not docs:
            continue
        ex = [d["exit_status"] for d in docs]
        worse = sorted(d["counts"]["worse"] for d in docs)
        cant = sorted(d["counts"][CANT] for d in docs)
        walls = sorted(d["wall_s"] for d in docs)
        lines.append(f"| {kind} | {len(docs)} | {ex.count(1)} | {ex.count(3)} | {ex.count(0)} | "
                     f"{worse[len(worse) // 2]}, {worse[-1]} | {cant[len(cant) // 2]} | {walls[len(walls) // 2]:.1f} |")
        for (b, n), d in zip(pairs, docs):
            detail.append(f"| {kind} | {b[0].parent.name if len(b) > 1 else b[0].parent.name + '/' + b[0].name} | "
                          f"{n[0].parent.name if len(n) > 1 else n[0].parent.name + '/' + n[0].name} | "
                          f"{d['exit_status']} | {d['counts']['worse']} | {d['counts']['better']} | "
                          f"{d['counts']['unchanged']} | {d['counts'][CANT]} |")
    same, slow = _finished(pool, "same", sets), _finished(pool, "slow", slow_sets)
    if slow and same:
        truth = _true_slowdown(pool, slow, same)
        doubled = sum(v >= 2.0 for v in truth.values())
        lines += ["", f"The slowdown (`taskset -c` one core for both ranks), median over {len(slow) * REPEATS} "
                      f"slowed against {len(same) * REPEATS} identical runs per point: {doubled} of {len(truth)} "
                      f"points 2x or slower, geometric mean x{_gmean(truth.values()):.2f}."]
    lines += ["", "Machine load (`uptime` after each `commbench run --repeat 3`):", ""]
    log = pool / "runs.jsonl"
    for entry in (json.loads(x) for x in log.read_text().splitlines() if x.strip()) if log.exists() else []:
        lines.append(f"- {entry['set']} ({entry['utc']}, {entry['wall_s']} s, exit {entry['rc']}): "
                     f"{entry['uptime_after']}")
    lines += ["", "Every pair:", "", "| kind | base | new | exit | worse | better | unchanged | can't tell |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |", *detail]
    return "\n".join(lines) + "\n"


def _gmean(values) -> float:
    import math

    v = [x for x in values if x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=ROOT / "results" / "compare-false-alarm")
    ap.add_argument("--sets", type=int, default=20, help="identical --repeat 3 sets (pairs: half)")
    ap.add_argument("--slow-sets", type=int, default=10, help="slowed --repeat 3 sets")
    ap.add_argument("--slow-cores", default="0", help="taskset core list of the slowed runs")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file to write (default: print)")
    args = ap.parse_args()
    if not args.judge_only:
        with open(args.pool / "runs.jsonl" if args.pool.exists() else _mk(args.pool), "a") as log:
            collect(args.pool, args.sets, args.slow_sets, args.slow_cores, log)
    if args.collect_only:
        return 0
    text = judge(args.pool, args.sets, args.slow_sets)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def _mk(pool: Path) -> Path:
    pool.mkdir(parents=True, exist_ok=True)
    return pool / "runs.jsonl"


if __name__ == "__main__":
    sys.exit(main())
