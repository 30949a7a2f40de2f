"""Does `compare --confirm` drop the regressions a passing disturbance made, and keep a lasting one?

Takes the pool of benchmarks/compare_false_alarm.py (sets of `commbench run suites/quickstart.yaml
--repeat 3`: same-NN on the idle tree, slow-NN with both ranks pinned to one core by `taskset`),
and for each pair same-i / slow-i runs three comparisons with `--fail-above 5 --json`:

- plain: what the gate says without confirming (the pinning judged as a regression);
- confirm, free: `--confirm N` from an unpinned process: the worse Cases are measured again at
  full speed, as when the disturbance has gone: the regressions should not reproduce;
- confirm, pinned: the same from a process pinned to one core (`taskset -c 0`; the ranks inherit
  it), as when the slowdown is real and stays: the regressions should be confirmed.

    .venv/bin/python benchmarks/compare_confirm.py --pairs 5 \\
        --out docs/measurements/2026-12-07-compare-confirm.md

Prints (and writes) a Markdown table: per pair and kind, the exit status, the points judged worse
and what the confirmation made of them, the compare wall time, and the machine's load."""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from machine_load import uptime  # benchmarks/ (the script's own folder)

ROOT = Path(__file__).resolve().parent.parent
COMMBENCH = ROOT / ".venv" / "bin" / "commbench"
FAIL_ABOVE_PCT = "5"


def _compare(base: Path, new: Path, json_path: Path, extra: list[str], pin: str | None) -> dict:
    cmd = [str(COMMBENCH), "compare", str(base), str(new), "--fail-above", FAIL_ABOVE_PCT,
           "--json", str(json_path), *extra]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    doc = json.loads(json_path.read_text()) if json_path.is_file() else {}
    points = doc.get("points", [])
    return {"exit": done.returncode, "wall_s": round(wall, 1),
            "worse": sum(p.get("verdict") == "worse" for p in points),
            "confirm": dict(Counter(p["confirm"] for p in points if p.get("confirm"))),
            "sentence": (doc.get("confirm") or {}).get("sentence", ""), "uptime": uptime(),
            "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode not in (0, 1, 3) else []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=ROOT / "results" / "compare-false-alarm")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="--confirm N")
    ap.add_argument("--pin", default="0", help="the core list the pinned confirmation runs on")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    work = a.pool / "confirm"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = []
    for i in range(a.pairs):
        base, new = a.pool / f"same-{i:02d}", a.pool / f"slow-{i:02d}"
        kinds = (("plain", [], None),
                 ("confirm, free", ["--confirm", str(a.repeats), "--confirm-out", str(work / f"free-{i}")], None),
                 ("confirm, pinned", ["--confirm", str(a.repeats), "--confirm-out", str(work / f"pinned-{i}")], a.pin))
        for kind, extra, pin in kinds:
            r = _compare(base, new, work / f"{kind.split(',')[-1].strip()}-{i}.json", extra, pin)
            rows.append((f"{base.name} vs {new.name}", kind, r))
            print(f"{base.name} vs {new.name} [{kind}]: exit {r['exit']}, worse {r['worse']}, "
                  f"confirm {r['confirm']}, {r['wall_s']} s | {r['uptime']}", flush=True)
    text = _table(rows, a)
    print(text)
    if a.out is not None:
        a.out.write_text(text)


def _table(rows: list, a) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# compare --confirm on this machine ({platform.node()}, {__import__('os').cpu_count()} CPUs)", "",
             f"benchmarks/compare_confirm.py --pairs {a.pairs} --repeats {a.repeats} ({stamp}), on the pool of "
             "benchmarks/compare_false_alarm.py: same-NN are `commbench run suites/quickstart.yaml --repeat 3`, "
             "slow-NN the same with both ranks pinned to one core (`taskset -c 0`). `--fail-above 5` "
             "throughout; exit 1: a regression; 3: inconclusive; 0: pass. *free*: the confirmation from an "
             f"unpinned process (the disturbance gone); *pinned*: from a process pinned to core {a.pin} (it stays).",
             "", "| pair | kind | exit | points worse after | confirm: what the worse points became | compare wall s |",
             "| --- | --- | --- | --- | --- | --- |"]
    for pair, kind, r in rows:
        told = ", ".join(f"{n} {k}" for k, n in sorted(r["confirm"].items())) or "-"
        lines.append(f"| {pair} | {kind} | {r['exit']} | {r['worse']} | {told} | {r['wall_s']} |")
    lines += ["", "Machine load after each comparison (`uptime`):", ""]
    lines += [f"- {pair} [{kind}]: {r['uptime']}" for pair, kind, r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
