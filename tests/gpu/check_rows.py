"""Does a GPU session step's run folder hold what the step expects? One verdict per step.

    python3 tests/gpu/check_rows.py RUN_DIR --run-rc RC [--expect SEL=STATUS ...]
                                    [--no-skip SEL ...] [--shared] [--min-rows N]
                                    [--require 'SEL:COL>0' | 'SEL:COL==VALUE' ...]

SEL is ``column=glob`` terms joined by ``,`` (e.g. ``bench=stale``, ``backend=nccl*,op=all_*``).
Every row must have its expected status: the status of the first ``--expect`` it matches, else
``ok`` (``skipped`` is accepted there too, unless the row matches a ``--no-skip``). ``--shared``:
every ok GPU row must say that ranks shared its GPU (ranks_per_gpu > 1). The run's exit status
must be what its rows imply (1 when any row is wrong/failed/timeout, else 0). ``--require``: every
ok row the selector matches has COL above 0 (or equal to VALUE), and at least one row matches. Prints the counts,
every skipped reason with how often, and each mismatch; exits 0 only when nothing is amiss.
"""
from __future__ import annotations

import argparse
import fnmatch
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from commbench.analysis.rehearsal import ranks_per_gpu
from commbench.runner import CPU_BACKENDS  # rows without a GPU


def _selector(text: str) -> list[tuple[str, str]]:
    terms = []
    for term in text.split(","):
        col, _, pattern = term.partition("=")
        if not col or not pattern:
            raise SystemExit(f"check_rows: bad selector term {term!r} (want column=glob)")
        terms.append((col.strip(), pattern.strip()))
    return terms


def _matches(row: dict, terms: list[tuple[str, str]]) -> bool:
    return all(fnmatch.fnmatchcase(str(row.get(col, "")), pattern) for col, pattern in terms)


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def requirement_problems(rows: list[dict], text: str) -> list[str]:
    """``SEL:COL>0`` or ``SEL:COL==VALUE`` over the ok rows SEL matches."""
    sel, _, cond = text.rpartition(":")
    terms = _selector(sel)
    hits = [r for r in rows if _matches(r, terms) and r.get("status") == "ok"]
    if not hits:
        return [f"require {text}: no ok row matches {sel}"]
    col, op, value = (cond.partition("==") if "==" in cond else cond.partition(">"))
    bad = [r for r in hits if not (str(r.get(col)) == value if op == "==" else _number(r.get(col)) > _number(value))]
    def why(r):
        return str(r.get("api_note") or r.get("profile_note") or r.get("reason"))[:120]
    return [f"require {text}: {len(bad)} of {len(hits)} rows miss it, e.g. {r.get('op')} {r.get('size_bytes')} B "
            f"x{r.get('world_size')}: {col}={r.get(col)!r} ({why(r)})" for r in bad[:1]]


def check(rows: list[dict], run_rc: int, expect: list[tuple[list, str]], no_skip: list[list],
          shared: bool, min_rows: int, require: tuple[str, ...] = ()) -> list[str]:
    """The problems of one step (empty: the step is as expected)."""
    problems = [p for text in require for p in requirement_problems(rows, text)]
    if len(rows) < min_rows:
        problems.append(f"{len(rows)} rows, expected at least {min_rows}")
    for row in rows:
        want = next((status for terms, status in expect if _matches(row, terms)), None)
        status = str(row.get("status"))
        name = f"{row.get('bench')} {row.get('op')} {row.get('backend')} {row.get('size_bytes')} B " \
               f"x{row.get('world_size')}"
        if want is None:
            allowed = {"ok"} | (set() if any(_matches(row, t) for t in no_skip) else {"skipped"})
            if status not in allowed:
                problems.append(f"{name}: {status} ({str(row.get('reason'))[:160]}), expected "
                                f"{' or '.join(sorted(allowed))}")
        elif status != want:
            problems.append(f"{name}: {status} ({str(row.get('reason'))[:160]}), expected {want}")
        if shared and status == "ok" and row.get("backend") not in CPU_BACKENDS:
            if int(row.get("world_size") or 0) > 1 and not ranks_per_gpu(row.get("ranks_per_gpu")) > 1:
                problems.append(f"{name}: ok with ranks sharing the GPU but ranks_per_gpu={row.get('ranks_per_gpu')}")
    bad = any(str(r.get("status")) in ("wrong", "failed", "timeout") for r in rows)
    want_rc = 1 if (bad or not rows) else 0
    if run_rc != want_rc:
        problems.append(f"commbench run exited {run_rc}; its rows imply {want_rc}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--run-rc", type=int, required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--no-skip", action="append", default=[])
    ap.add_argument("--shared", action="store_true")
    ap.add_argument("--min-rows", type=int, default=1)
    ap.add_argument("--require", action="append", default=[])
    args = ap.parse_args(argv)
    csv = args.run_dir / "results.csv"
    if not csv.exists():
        print(f"check: no {csv}")
        return 1
    import pandas as pd

    rows = pd.read_csv(csv, keep_default_na=False).to_dict("records")
    expect = []
    for text in args.expect:
        sel, _, status = text.rpartition("=")
        expect.append((_selector(sel), status))
    problems = check(rows, args.run_rc, expect, [_selector(t) for t in args.no_skip], args.shared, args.min_rows,
                     tuple(args.require))
    counts = Counter(str(r.get("status")) for r in rows)
    wrong = sum(int(float(r["wrong"])) for r in rows if str(r.get("wrong", "")).strip() not in ("", "nan"))
    print(f"check: {len(rows)} rows: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"; wrong elements {wrong}; {'as expected' if not problems else f'{len(problems)} problem(s)'}")
    for reason, n in Counter(str(r.get("reason"))[:140] for r in rows if r.get("status") == "skipped").most_common():
        print(f"  skipped x{n}: {reason}")
    for p in problems[:40]:
        print(f"  PROBLEM {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
