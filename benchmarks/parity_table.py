"""The parity table: commbench time / nccl-tests time per op, size and in-place, for the
default loop (commbench `pipelined`) and CUDA graphs (commbench `graph` vs nccl-tests -G).

    python benchmarks/parity_table.py NCCL_TESTS_RUN COMMBENCH_RUN --out parity.md \
        [--machine TEXT] [--target 1.05]

NCCL_TESTS_RUN is a folder made by `commbench import nccl-tests`, COMMBENCH_RUN one made by
`commbench run suites/parity.yaml`. Points are paired by `commbench compare` itself, so the
table says exactly what `commbench compare NCCL_TESTS_RUN COMMBENCH_RUN` says. Prints the
summary and exits 1 when a paired ok point is above the target ratio, 2 when the commbench run
is a rehearsal (ranks shared a GPU: its times are not speed). A point where both tools time less
than --floor-us (default 0.1 us: a one-rank in-place collective enqueues no work, and both read
timer resolution) is shown with its ratio but not held to the target.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from commbench.analysis import rehearsal
from commbench.analysis.compare import compare_runs
from commbench.runfolder.reader import Run, load_run
from commbench.analysis.report.markdown import table_md
from commbench.units import format_size

MODES = (("pipelined", "default loop / pipelined"), ("graph", "-G 5 / graph"))


def _under_floor(base_us, new_us, floor_us: float):
    """Both tools timed less than floor_us: no work was timed, the ratio is of timer resolution."""
    return (base_us < floor_us) & (new_us < floor_us)


def _cell(row, target: float, floor_us: float = 0.0) -> tuple[str, str, str]:
    """(nccl-tests us, commbench us, ratio) for one paired point; ratio in bold above the target
    (a point under the floor is marked so instead)."""
    if row is None:
        return "", "", "not measured"
    tb, tn, ratio = row["time_base_us"], row["time_new_us"], row["time_ratio"]
    fmt = lambda t: "" if pd.isna(t) else f"{t:.2f}"  # noqa: E731
    if pd.isna(ratio):
        return fmt(tb), fmt(tn), str(row["why"])
    text = f"{ratio:.3f}"
    if _under_floor(tb, tn, floor_us):
        return fmt(tb), fmt(tn), f"{text} (under {floor_us:g} us)"
    return fmt(tb), fmt(tn), f"**{text}**" if ratio > target else text


def paired(base: Run, new: Run) -> pd.DataFrame:
    """compare_runs within each timing mode: a pipelined point never pairs with a graph one."""
    frames = []
    for mode, _ in MODES:
        b = replace(base, results=base.results[base.results["timing"] == mode])
        n = replace(new, results=new.results[new.results["timing"] == mode])
        if len(b.results) or len(n.results):
            pts = compare_runs(b, n)
            pts["timing"] = mode
            frames.append(pts)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["op", "timing"])


def parity_frame(points: pd.DataFrame, target: float, floor_us: float = 0.0) -> pd.DataFrame:
    """One line per (op, in_place, size): both timing modes side by side."""
    pts = points[points["timing"].isin([m for m, _ in MODES])]
    lines = []
    for (op, in_place, size), g in pts.groupby(["op", "in_place", "size_bytes"], sort=True):
        rec = {"op": op, "in_place": bool(in_place), "size": format_size(int(size))}
        for mode, _ in MODES:
            hit = g[g["timing"] == mode]
            row = hit.iloc[0] if len(hit) else None
            nt, cb, ratio = _cell(row, target, floor_us)
            rec.update({f"nccl-tests {mode} us": nt, f"commbench {mode} us": cb, f"ratio {mode}": ratio})
        lines.append(rec)
    return pd.DataFrame(lines)


def summary_frame(points: pd.DataFrame, target: float, floor_us: float = 0.0) -> pd.DataFrame:
    """Per op and mode: paired ok points, how many both tools timed under the floor (not held to
    the target), and of the others: how many are within the target, how many agree within the
    same margin both ways (commbench neither slower nor faster), median, best and worst ratio."""
    rows = []
    for (op, mode), g in points[points["timing"].isin([m for m, _ in MODES])].groupby(["op", "timing"]):
        r = pd.to_numeric(g["time_ratio"], errors="coerce").dropna()
        tiny = _under_floor(pd.to_numeric(g.loc[r.index, "time_base_us"], errors="coerce"),
                            pd.to_numeric(g.loc[r.index, "time_new_us"], errors="coerce"), floor_us)
        held = r[~tiny]   # the ratios held to the target (the statistics are of these)
        rows.append({"op": op, "timing": mode, "paired ok points": len(r),
                     f"under {floor_us:g} us": int(tiny.sum()),
                     f"within {target}": int((held <= target).sum()),
                     f"within ±{target - 1:.0%}": int(((held <= target) & (held >= 2 - target)).sum()),
                     "median ratio": round(float(held.median()), 3) if len(held) else None,
                     "best ratio": round(float(held.min()), 3) if len(held) else None,
                     "worst ratio": round(float(held.max()), 3) if len(held) else None,
                     "at": format_size(int(g.loc[held.idxmax(), "size_bytes"])) if len(held) else ""})
    return pd.DataFrame(rows)


def _commands(meta: dict) -> str:
    """The nccl-tests command lines (-J files carry them), else the settings its headers state."""
    if meta.get("command"):
        return f"`{meta['command']}`"
    seen = []
    for run in meta.get("nccl_tests") or []:
        s = run.get("settings") or {}
        text = (f"{run.get('program')} -b {s.get('min_bytes')} -e {s.get('max_bytes')} -g {s.get('ngpus')} "
                f"-w {s.get('warmup_iters')} -n {s.get('iters')}" + (f" -G {s['graph_launches']}"
                                                                     if s.get("graph_launches") else ""))
        seen.append(f"`{text}`")
    return ", ".join(dict.fromkeys(seen)) or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nccl_tests_run", type=Path)
    ap.add_argument("commbench_run", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--machine", default="", help="what ran it (GPU names and count)")
    ap.add_argument("--target", type=float, default=1.05)
    ap.add_argument("--floor-us", type=float, default=0.1,
                    help="points both tools time under this are shown, not held to the target")
    args = ap.parse_args(argv)
    base, new = load_run(args.nccl_tests_run), load_run(args.commbench_run)
    shared = rehearsal.shared_mask(new.results)
    if shared.any():   # a rehearsal's times are the GPU time-sliced between ranks, not speed
        most = int(pd.to_numeric(new.results.loc[shared, rehearsal.COLUMN], errors="coerce").max())
        print(f"parity: refused: {int(shared.sum())} commbench row(s): {rehearsal.shared_reason(most)}",
              file=sys.stderr)
        return 2
    points = paired(base, new)
    summary = summary_frame(points, args.target, args.floor_us)
    over = int(sum(summary["paired ok points"] - summary[f"under {args.floor_us:g} us"]
                   - summary[f"within {args.target}"])) if len(summary) else 0
    nccl = {base.meta.get("nccl"), new.meta.get("nccl")}
    text = [
        "# commbench vs nccl-tests: time ratio per op and size", "",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {args.machine or ', '.join(new.meta.get('gpus') or []) or 'unknown'}",
        f"- NCCL: nccl-tests loaded {base.meta.get('nccl')}, commbench {new.meta.get('nccl')}"
        + ("" if len(nccl) == 1 else " (DIFFERENT libraries: ratios compare two NCCLs)"),
        f"- nccl-tests {base.meta.get('nccl_tests_version') or ''}: {_commands(base.meta)}",
        f"- runs: `{args.nccl_tests_run}` (imported) and `{args.commbench_run}` (suites/parity.yaml); "
        f"`commbench compare` pairs the points",
        f"- ratio = commbench time / nccl-tests time (< 1: commbench faster); target <= {args.target}, "
        f"above it in bold; {over} paired point(s) above it; points both tools time under "
        f"{args.floor_us:g} us (no work timed) are shown, not held to the target",
        "", "## Summary", "", table_md(summary) if len(summary) else "no paired points", "",
        "## Every point", "", table_md(parity_frame(points, args.target, args.floor_us)), "",
    ]
    args.out.write_text("\n".join(text))
    print(table_md(summary) if len(summary) else "no paired points")
    print(f"wrote {args.out}; {over} paired point(s) above {args.target}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
