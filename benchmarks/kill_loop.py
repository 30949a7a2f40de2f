"""Kill `commbench run`, or its launcher, at random moments, and check what is left.

Every try runs a CPU suite (default: suites/quickstart.yaml at two sizes) into a fresh folder with
a marker of its own in the environment (KILL_LOOP_VAR), which every process under the run inherits:
the keeper, the launcher (Open MPI's prterun), its ranks. Then, at a random moment:

- ``run`` tries: `commbench run` itself gets SIGKILL, SIGTERM or SIGINT (in turn);
- ``launcher`` tries: the launcher the run started gets SIGKILL or SIGTERM (in turn), at a random
  moment after it started; the run goes on by itself.

Each try then checks, in this order: the run exited; no process carrying the try's marker is
left (waited for up to --settle-s; /proc/PID/environ is read); the folder's lock is free (no
process holds its flock: a lock file naming a dead run is stale, and a --resume takes it);
`commbench run --resume` completes with exit 0; the folder reads back (the reader refuses duplicate
(case, rank, iteration) sample keys) with one ok row per Case, every row a launch stored carrying
its `attempt`; and again no process left. Writes a Markdown table and the counts:

    .venv/bin/python benchmarks/kill_loop.py --tries 20 --out docs/measurements/DATE-kill-loop.md
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commbench import procs  # noqa: E402
from commbench.runfolder.lock import writer_holding  # noqa: E402

KILL_LOOP_VAR = "COMMBENCH_KILL_LOOP"
RUN_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
LAUNCHER_SIGNALS = (signal.SIGKILL, signal.SIGTERM)


@dataclass
class Try:
    index: int
    mode: str              # run | launcher
    sig: str
    delay_s: float         # seconds after the run started, or after its launcher started (``after``)
    after: str = "run"
    seen: int = 0          # processes carrying the marker just before the kill
    run_rc: int | None = None
    left: list = field(default_factory=list)   # marked processes still there after --settle-s
    gone_s: float = 0.0    # how long until none was left
    lock_free: bool = False
    holder: str = ""
    resume_rc: int | None = None
    rows: int = 0
    cases: int = 0
    ok: int = 0
    without_attempt: int = 0
    attempts: str = ""
    read_error: str = ""
    left_after_resume: list = field(default_factory=list)
    note: str = ""

    @property
    def passed(self) -> bool:
        return (not self.left and self.lock_free and self.resume_rc == 0 and not self.read_error
                and self.ok == self.cases > 0 and not self.without_attempt and not self.left_after_resume)


def commbench_argv(args, out: Path, resume: bool) -> list[str]:
    argv = [sys.executable, "-m", "commbench", "run", str(args.suite), "--out", str(out), "--quiet"]
    for s in args.set:
        argv += ["--set", s]
    for name in args.only:
        argv += ["--only", name]
    return argv + (["--resume"] if resume else [])


def marked(token: str) -> list[int]:
    return procs.marked(KILL_LOOP_VAR, token)


def children(pid: int, name: str) -> list[int]:
    out = []
    for p in procs._proc_pids():
        try:
            ppid = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]
            comm = Path(f"/proc/{p}/comm").read_text().strip()
        except (OSError, IndexError):
            continue
        if ppid == str(pid) and comm == name:
            out.append(p)
    return out


def wait_gone(token: str, limit_s: float) -> tuple[list[int], float]:
    t0 = time.monotonic()
    while (left := marked(token)) and time.monotonic() - t0 < limit_s:
        time.sleep(0.1)
    return left, time.monotonic() - t0


def start(args, out: Path, token: str, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, KILL_LOOP_VAR: token}
    log = open(out.parent / f"{out.name}{'.resume' if resume else ''}.log", "w")
    return subprocess.Popen(commbench_argv(args, out, resume), env=env, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_sigint_default)


def _sigint_default() -> None:
    """A loop started in the background (`cmd &`) ignores SIGINT, and so would the run it starts
    (an ignored signal stays ignored through exec): the run gets Ctrl-C's usual meaning back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_run(t: Try, run: subprocess.Popen, token: str, rng: random.Random, args) -> None:
    """Even tries: a moment after the run started; odd tries: a moment after its launcher started
    (so that half the kills land while the launch runs, whatever the run's other phases take)."""
    if t.index % 2:
        t.after = "launcher"
        if not wait_launcher(run, args):
            t.note = f"no {args.launcher} seen"
        t.delay_s = round(rng.uniform(0.0, args.launcher_max_s), 2)
    else:
        t.delay_s = round(rng.uniform(args.min_s, args.max_s), 2)
    deadline = time.monotonic() + t.delay_s
    while time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    t.seen = len(marked(token))
    if run.poll() is not None:
        t.note = "the run ended before the kill"
        return
    os.kill(run.pid, getattr(signal, t.sig))


def wait_launcher(run: subprocess.Popen, args) -> list[int]:
    launcher, deadline = [], time.monotonic() + 120
    while not launcher and run.poll() is None and time.monotonic() < deadline:
        launcher = children(run.pid, args.launcher)
        time.sleep(0.05)
    return launcher


def kill_launcher(t: Try, run: subprocess.Popen, token: str, rng: random.Random, args) -> None:
    t.after = "launcher"
    launcher = wait_launcher(run, args)
    if not launcher:
        t.note = f"no {args.launcher} seen"
        return
    t.delay_s = round(rng.uniform(0.0, args.launcher_max_s), 2)
    time.sleep(t.delay_s)
    t.seen = len(marked(token))
    if not procs.runs(launcher[0]):   # ended (a zombie not reaped yet counts as ended)
        t.note = "the launch had ended before the kill"
        return
    try:
        os.kill(launcher[0], getattr(signal, t.sig))
    except ProcessLookupError:
        t.note = "the launch had ended before the kill"


def check_folder(t: Try, out: Path) -> None:
    from commbench.runfolder.reader import load_run
    from commbench.errors import CommbenchError

    try:
        run = load_run(out)
    except CommbenchError as exc:
        t.read_error = str(exc)[:300]
        return
    rows = run.results
    t.rows, t.cases = len(rows), rows["case_id"].nunique()
    t.ok = int((rows["status"] == "ok").sum())
    stored = [r for r in _jsonl(out) if r.get("log")]   # rows a launch stored (the plan's skips have no log)
    t.without_attempt = sum(1 for r in stored if r.get("attempt") is None)
    t.attempts = ",".join(str(a) for a in sorted({r.get("attempt") for r in stored if r.get("attempt") is not None}))


def _jsonl(out: Path) -> list[dict]:
    import json

    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def one_try(args, t: Try, rng: random.Random) -> Try:
    out = args.work / f"try-{t.index:02d}-{t.mode}"
    shutil.rmtree(out, ignore_errors=True)
    token = secrets.token_hex(8)
    run = start(args, out, token)
    try:
        (kill_run if t.mode == "run" else kill_launcher)(t, run, token, rng, args)
        t.run_rc = run.wait(timeout=args.run_limit_s)
    except subprocess.TimeoutExpired:
        t.note += " run did not exit"
        run.kill()
        t.run_rc = run.wait()
    t.left, t.gone_s = wait_gone(token, args.settle_s)
    t.gone_s = round(t.gone_s, 2)
    holder = writer_holding(out) if out.exists() else None
    t.lock_free, t.holder = holder is None, holder or ""
    procs.kill_all(t.left)   # whatever was left must not spoil the next try
    resume = (out / "run.json").exists()
    if not resume:
        shutil.rmtree(out, ignore_errors=True)
        t.note += " killed before the folder was written: a fresh run"
    again = start(args, out, token, resume=resume)
    try:
        t.resume_rc = again.wait(timeout=args.run_limit_s)
    except subprocess.TimeoutExpired:
        again.kill()
        t.resume_rc = again.wait()
        t.note += " resume did not finish"
    t.left_after_resume, _ = wait_gone(token, args.settle_s)
    procs.kill_all(t.left_after_resume)
    check_folder(t, out)
    return t


def plan(args) -> list[Try]:
    tries = [Try(i, "run", RUN_SIGNALS[i % len(RUN_SIGNALS)].name, 0.0) for i in range(args.tries)]
    tries += [Try(args.tries + i, "launcher", LAUNCHER_SIGNALS[i % len(LAUNCHER_SIGNALS)].name, 0.0)
              for i in range(args.tries)]
    return [t for t in tries if t.mode in args.modes]


def table(tries: list[Try]) -> list[str]:
    head = ("| # | kill | signal | at s after | procs before | run exit | left after | gone in s | lock free | "
            "resume exit | rows / Cases / ok | attempts | left after resume | result |")
    lines = [head, "|" + " --- |" * 14]
    for t in tries:
        result = "pass" if t.passed else f"FAIL {t.read_error or ''}".strip()
        lines.append(f"| {t.index} | {t.mode} | {t.sig} | {t.delay_s} {t.after} | {t.seen} | {t.run_rc} | "
                     f"{len(t.left)} | "
                     f"{t.gone_s} | {'yes' if t.lock_free else 'no: ' + t.holder} | {t.resume_rc} | "
                     f"{t.rows} / {t.cases} / {t.ok} | {t.attempts or '-'} | {len(t.left_after_resume)} | "
                     f"{result}{' (' + t.note.strip() + ')' if t.note.strip() else ''} |")
    return lines


def summary(tries: list[Try]) -> list[str]:
    out = []
    for mode in ("run", "launcher"):
        mine = [t for t in tries if t.mode == mode]
        if mine:
            out.append(f"- kill `{mode}`: {sum(t.passed for t in mine)} of {len(mine)} tries pass; "
                       f"processes left after the kill: {sum(len(t.left) for t in mine)}; lock held after: "
                       f"{sum(not t.lock_free for t in mine)}; resume not exit 0: "
                       f"{sum(t.resume_rc != 0 for t in mine)}; folders refused on reading: "
                       f"{sum(bool(t.read_error) for t in mine)}; slowest clean-up {max(t.gone_s for t in mine)} s")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=20, help="tries per mode (default 20)")
    p.add_argument("--modes", nargs="+", default=["run", "launcher"], choices=["run", "launcher"])
    p.add_argument("--suite", type=Path, default=ROOT / "suites" / "quickstart.yaml")
    p.add_argument("--set", action="append", default=None, help="--set for every run (default: sizes=[8B,4KiB])")
    p.add_argument("--only", action="append", default=[], help="--only for every run (a benchmark of the suite)")
    p.add_argument("--min-s", type=float, default=0.5, help="earliest kill of the run, seconds after its start")
    p.add_argument("--max-s", type=float, default=14.0, help="latest kill of the run")
    p.add_argument("--launcher", default="prterun", help="the launcher's process name (Open MPI 5: prterun)")
    p.add_argument("--launcher-max-s", type=float, default=5.0, help="latest kill after the launcher started")
    p.add_argument("--settle-s", type=float, default=20.0, help="how long processes may take to go")
    p.add_argument("--run-limit-s", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--work", type=Path, default=Path("/tmp/commbench-kill-loop"))
    p.add_argument("--out", type=Path, default=None, help="Markdown file to write (else stdout)")
    args = p.parse_args(argv)
    args.set = args.set or ["sizes=[8B,4KiB]"]
    args.seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    rng = random.Random(args.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    tries, t0 = [], time.time()
    for t in plan(args):
        tries.append(one_try(args, t, rng))
        print(table([t])[-1], flush=True)
    lines = [f"# Kill loop ({datetime.now(timezone.utc).date()})", "",
             f"Machine: {platform.node()}, {os.cpu_count()} CPU(s), {platform.platform()}; "
             f"Python {platform.python_version()}; launcher {args.launcher}.",
             f"Command: `{' '.join([Path(sys.executable).name, 'benchmarks/kill_loop.py', *(argv or sys.argv[1:])])}` "
             f"(seed {args.seed}); each try: `{' '.join(commbench_argv(args, Path('TRY'), False)[1:])}`, "
             f"then the same with `--resume`. Wall time {time.time() - t0:.0f} s.", "",
             *summary(tries), "", *table(tries), ""]
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0 if all(t.passed for t in tries) else 1


if __name__ == "__main__":
    sys.exit(main())
