"""`run --duration 8h` (or the suite key ``duration:``): burn-in. The suite runs pass after pass
into ONE run folder until the duration is over (checked at pass boundaries), each pass a --resume
of the folder; when a pass ends its rows are stamped with ``pass`` and ``pass_utc`` and its samples
with ``pass`` (docs/results.md), and the next pass measures every Case again. Ctrl-C stamps the
rows and samples of the pass it cut short."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from ..errors import CommbenchError
from ..runfolder import RunFolder
from ..runfolder.samples_kept import stamp_samples
from ..runfolder.schema import FAILING, PASS_COLUMN, PASS_UTC_COLUMN
from ..runfolder.writer import atomic_write
from .repeat import default_out, on_root



def _now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def last_pass(out: Path) -> tuple[int, bool]:
    """(the highest stamped pass in ``out``, whether rows of a later, unfinished pass follow)."""
    rows = RunFolder(out).rows() if (Path(out) / "results.jsonl").exists() else []
    stamped = [int(r[PASS_COLUMN]) for r in rows if isinstance(r.get(PASS_COLUMN), int)]
    return max(stamped, default=0), any(PASS_COLUMN not in r for r in rows)


def stamp_pass(folder: RunFolder, pass_no: int, pass_utc: str) -> int:
    """Stamp every unstamped row of results.jsonl with ``pass_no`` and ``pass_utc`` (atomically)
    and mirror the CSV, and every unstamped sample with ``pass_no``; the number of rows stamped.
    The caller holds the folder."""
    path = folder.path / "results.jsonl"
    if not path.exists():
        return 0
    stamp_samples(folder.path, pass_no)   # first: a kill between the two leaves rows to stamp again
    lines, stamped = [], 0
    for raw in path.read_bytes().splitlines():
        try:
            row = json.loads(raw)
        except ValueError:
            lines.append(raw)   # a line cut by a crash stays as it was (readers skip it)
            continue
        if isinstance(row, dict) and PASS_COLUMN not in row:
            row[PASS_COLUMN], row[PASS_UTC_COLUMN] = pass_no, pass_utc
            stamped += 1
            raw = json.dumps(row).encode()
        lines.append(raw)
    if stamped:
        atomic_write(path, b"".join(line + b"\n" for line in lines))
        folder.rewrite_csv()   # the writer sees the new file and re-reads it
    return stamped


def _stamp_unlocked(out: Path, pass_no: int, pass_utc: str) -> None:
    """Stamp after run_suite released the folder (Ctrl-C mid-pass): take it again for the stamp."""
    folder = RunFolder(out)
    try:
        folder.claim(resume=True)
    except CommbenchError:   # not a run folder yet, or a rank still holds it: readers infer the pass
        return
    try:
        stamp_pass(folder, pass_no, pass_utc)
    finally:
        folder.release()


def run_burnin(suite, out: Path | None, duration_s: float, *, resume: bool, run_one,
               clock=time.monotonic) -> tuple[Path, int]:
    """Run passes until ``duration_s`` has passed at a pass boundary; (the run folder, passes run).

    ``run_one(out_dir, again, finish_wrap)`` runs one pass of the Suite ``suite`` as `run` runs a suite; it calls
    ``finish_wrap(folder)`` once the pass's rows are stored (the folder still held). A --resume
    numbers on from the last pass (first finishing one a kill left unstamped); the duration counts
    from now."""
    out = default_out(suite, out, resume, "--duration",
                      "the run folder that holds (or will hold) the burn-in")
    fresh = not (out.exists() and (out / "results.jsonl").exists())
    if not fresh and not resume:
        raise CommbenchError(f"{out} already holds results: pass --resume to continue the burn-in, or "
                             "choose another --out.")
    start = clock()
    done_passes, pending = on_root(lambda: last_pass(out))
    pass_no, passes = done_passes + 1, 0
    again = resume and out.exists() and any(out.iterdir())   # a folder cut before its first row too
    while True:
        pass_utc = _now_utc() if not pending else _pending_utc(out)

        def finish_wrap(folder, n=pass_no, utc=pass_utc):
            stamp_pass(folder, n, utc)

        try:
            run_one(out, again, finish_wrap)
        except KeyboardInterrupt:
            on_root(lambda n=pass_no, utc=pass_utc: _stamp_unlocked(out, n, utc))
            raise
        passes += 1
        if on_root(lambda: clock() - start >= duration_s):
            return out, passes
        pass_no, pending, again = pass_no + 1, False, True




def failures_over_passes(out: Path) -> str:
    """'' when every row of every pass is correct and finished, else a sentence saying how many were
    not and in which passes (results.csv, and so `run`'s counts, shows only each Case's last row)."""
    def find():
        rows = RunFolder(out).rows() if (Path(out) / "results.jsonl").exists() else []
        bad = [r for r in rows if r.get("status") in FAILING
               or (isinstance(r.get("wrong"), (int, float)) and r["wrong"] > 0)]
        passes = sorted({r[PASS_COLUMN] for r in bad if isinstance(r.get(PASS_COLUMN), int)})
        return (f"{len(bad)} row(s) of the burn-in not correct or not finished"
                + (f" (pass {', '.join(map(str, passes[:10]))}{' ...' if len(passes) > 10 else ''})" if passes else "")
                if bad else "")
    return on_root(find)


def burnin_exit_status(out: Path, passes: int, code: int, summary: str) -> tuple[int, str]:
    """`run`'s exit status and summary (from the last row of each Case) made to cover every pass:
    1 when a row of any pass was not correct or not finished."""
    head, _, tail = summary.rpartition(" -> ")
    head = f"{head} in the last pass; {passes} pass(es) this call"
    earlier = failures_over_passes(out)
    if earlier:
        return 1, f"{head}; {earlier} -> exit 1"
    return code, f"{head} -> {tail}"


def _pending_utc(out: Path) -> str:
    """A resumed pass keeps the start time of its first rows (run.json's last start otherwise)."""
    from ..runfolder import read_meta

    meta = read_meta(out)
    starts = meta.get("resumed_utc") or [meta.get("started_utc")]
    return str(starts[-1] or _now_utc())
