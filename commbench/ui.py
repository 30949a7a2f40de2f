"""Console output: the progress of a run and the end-of-run summary.

On a terminal: a live progress line (what runs now, Case i of n, elapsed, ETA) laid out so that
the counts and the ETA survive an 80-column window. Anywhere else (a batch log, a pipe, every
rank job under mpiexec or srun): one plain line per finished Case and no ANSI codes at all.
Names a user types into a suite (ops, backends, parameter names) are never cut: their columns
keep their full width and the free text beside them wraps.
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from .units import format_size

# The headline of a group of rows is read the same way in the end-of-run table and in the report's
# Summary (commbench.analysis.report.tables.summary): small-message latency is the median time at
# the largest size up to SMALL_MESSAGE_BYTES (else the smallest size), one row per op, backend,
# variant and each of SPLIT_COLUMNS whose value varies in the run.
SMALL_MESSAGE_BYTES = 1024
SPLIT_COLUMNS = ("dtype", "world_size", "in_place", "timing")


def small_message_pick(sizes) -> int:
    """Position in ``sizes`` of the row small-message latency is read at."""
    sizes = [float(x) for x in sizes]
    small = [i for i, x in enumerate(sizes) if x <= SMALL_MESSAGE_BYTES]
    if small:
        return max(small, key=lambda i: sizes[i])
    return min(range(len(sizes)), key=lambda i: sizes[i])


def split_columns(df) -> list[str]:
    """The SPLIT_COLUMNS of ``df`` whose value varies."""
    return [c for c in SPLIT_COLUMNS if c in df.columns and df[c].astype(str).nunique() > 1]


def make_console(stderr: bool = False) -> Console:
    """A console that writes colour and live displays only to a terminal (and never with NO_COLOR).

    A rank of an MPI job is never at a terminal: Open MPI hands its ranks a pseudo-terminal that
    ends in the job's log, which must stay plain text."""
    from .world import inside_mpi_job

    stream = sys.stderr if stderr else sys.stdout
    tty = bool(getattr(stream, "isatty", lambda: False)()) and not inside_mpi_job()
    return Console(stderr=stderr, force_terminal=None if tty else False,
                   no_color=not tty or "NO_COLOR" in os.environ, highlight=tty)


def name_column(table: Table, header: str, names, **kw) -> None:
    """A column of names a user types: never folded or cut (the other columns wrap instead)."""
    width = max([len(header), *(len(str(n)) for n in names)])
    table.add_column(header, no_wrap=True, min_width=width, **kw)


def describe_case(case, row: dict | None = None, with_size: bool = True) -> str:
    """bench: op backend dtype size [variant]; the size is the row's when the family stored the
    bytes it really moved (a training step's), in-place when the Case is."""
    size = _number((row or {}).get("size_bytes"))
    size = int(size) if size is not None else case.size_bytes
    place = " in-place" if _param(case, "in_place") is True else ""
    size_text = f" {format_size(size)}" if with_size else ""
    return f"{case.bench}: {case.op} {case.backend} {case.dtype}{size_text}{place} [{case.variant}]"


def _param(case, name: str):
    getter = getattr(case, "param", None)
    return getter(name) if callable(getter) else None


def _number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def us(value: float) -> str:
    """A time in microseconds, 3 significant digits or more."""
    if value < 10:
        return f"{value:.2f} us"
    if value < 1000:
        return f"{value:.1f} us"
    return f"{value:,.0f} us"


def headline(row: dict | None) -> str:
    """The numbers a finished Case is read by, taken from the columns its row has: the layer and
    its parts (MoE layer) or the step (training), each with its exposed communication, overlap
    and idle time (and what two-batch overlap hid), p50/p99 (latency ops), else time and busbw;
    for a row not ok, its reason."""
    if not row:
        return ""
    if row.get("status") not in ("ok", "wrong"):
        reason = " ".join(str(row.get("reason") or "").split())
        return reason[:100] + ("..." if len(reason) > 100 else "")
    n = {k: _number(v) for k, v in row.items()}
    if n.get("layer_us") is not None:
        split = [f"{name} {us(n[col])}" for name, col in (("dispatch", "dispatch_us"), ("experts", "expert_us"),
                                                           ("combine", "combine_us")) if n.get(col) is not None]
        text = f"layer {us(n['layer_us'])}" + (f" ({', '.join(split)})" if split else "")
        return "; ".join([text, *_split_text(n)])
    if n.get("step_us") is not None:
        step = n["time_us"] if n.get("time_us") is not None else n["step_us"]
        return "; ".join([f"step {us(step)}", *_split_text(n)])
    if n.get("latency_p50_us") is not None:
        p99 = n.get("latency_p99_us")
        return f"p50 {us(n['latency_p50_us'])}" + (f", p99 {us(p99)}" if p99 is not None else "")
    parts = [us(n["time_us"])] if n.get("time_us") is not None else []
    if n.get("busbw_gbps") is not None:
        parts.append(f"busbw {n['busbw_gbps']:.2f} GB/s")
    if row.get("status") == "wrong" and n.get("wrong"):
        parts.append(f"{int(n['wrong'])} wrong")
    if n.get("bitwise_mismatch"):   # check: bitwise (measure/bitwise.py)
        parts.append(f"{int(n['bitwise_mismatch'])} of {int(n.get('bitwise_repeats') or 0)} repetitions differ bitwise")
    return ", ".join(parts)


def _split_text(n: dict) -> list[str]:
    """The step split from its timeline as far as the row has it: the profiled step (when it is
    not the timed one) and the critical path's shares, exposed communication, overlap and idle
    time, and what two-batch overlap hid (MoE layer); [] without a split."""
    parts = _split_parts(n)
    if not parts:
        return []
    timed = n["layer_us"] if n.get("layer_us") is not None else n.get("time_us")
    step = n.get("step_us")
    if step is not None and timed is not None and abs(step - timed) > 0.005 * max(abs(timed), 1e-9):
        return [f"profiled step {us(step)}: " + ", ".join(parts)]
    return [", ".join(parts)]


def _split_parts(n: dict) -> list[str]:
    """Compute share, exposed communication, overlap and idle time of a step split from its
    timeline (shares of the slowest rank's step beside), and what two-batch overlap hid."""
    def pct(col):
        v = n.get(col)
        return f" ({v:.0f}%)" if v is not None else ""

    parts = []
    if n.get("compute_share_pct") is not None:
        parts.append(f"compute {n['compute_share_pct']:.0f}%")
    if n.get("exposed_comm_us") is not None:
        parts.append(f"exposed {us(n['exposed_comm_us'])}" + pct("exposed_share_pct"))
    if n.get("overlap_pct") is not None:
        parts.append(f"overlap {n['overlap_pct']:.0f}%")
    if n.get("idle_us") is not None:
        parts.append(f"idle {us(n['idle_us'])}" + pct("idle_share_pct"))
    if n.get("tbo_hidden_us") is not None:
        gain = n.get("tbo_gain_pct")
        parts.append(f"two-batch hid {us(n['tbo_hidden_us'])}" + (f" ({gain:.0f}%)" if gain is not None else ""))
    return parts


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class CaseLines:
    """One plain line per finished Case: `[12/152] ok      bench: op backend dtype size [variant]:
    12.3 us, busbw 4.56 GB/s (0:01:10 elapsed, ETA 0:07:30)`.

    The ETA is the time per Case between the first finished Case and the latest one, times the
    Cases left: the start-up before the first Case (processes, communicators, JIT) is paid once
    and says nothing about the rest, so the first line has no ETA yet."""

    def __init__(self, total: int, write=None):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.t_first: float | None = None
        self.write = write or (lambda line: print(line, flush=True))

    def eta_s(self, now: float) -> float | None:
        if self.t_first is None or self.done < 2:
            return None
        return (now - self.t_first) / (self.done - 1) * (self.total - self.done)

    def case_done(self, description: str, status: str, numbers: str = "") -> None:
        self.done += 1
        now = time.time()
        if self.t_first is None:
            self.t_first = now
        eta = self.eta_s(now)
        eta_text = _clock(eta) if eta is not None else ("0:00:00" if self.done >= self.total else "-:--:--")
        self.write(f"[{self.done}/{self.total}] {status:<7} {description}{': ' + numbers if numbers else ''} "
                   f"({_clock(now - self.t0)} elapsed, ETA {eta_text})")


class RunDisplay:
    """Case i of n, elapsed, ETA; the description names the Case being measured."""

    def __init__(self, console: Console | None, total: int, enabled: bool, by_id: dict, row_of=None):
        self.console = console or make_console(stderr=True)
        self.by_id = by_id
        self.row_of = row_of or (lambda case_id: None)   # the stored row of a finished Case
        self.enabled = enabled and total > 0
        self.live = self.enabled and self.console.is_terminal
        self.lines = CaseLines(total, lambda line: self.console.print(line, markup=False, highlight=False,
                                                                      soft_wrap=True))
        # The description takes what is left and is cut with an ellipsis; the bar shrinks to fit;
        # the counts, elapsed time and ETA keep their width (an 80-column window shows them all).
        self.progress = Progress(
            TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=None, table_column=Column(ratio=0, max_width=24)),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, transient=False, disable=not self.live, expand=True)
        self.task = self.progress.add_task("starting", total=total)
        self.current: dict[str, str] = {}
        self.bad = 0
        # benchmarks whose rows store the bytes a Case really moved (a training step's), not the
        # suite's size: the live line names no size for their next Cases
        self.own_sizes: set[str] = set()
        self.waves = None   # a launch.waves.WaveState while a wave of several launches runs

    def wave(self, state, launch_ids: list) -> None:
        """A wave of several launches (or any wave of a ``placement: search``) starts (``state``),
        or ends (None): the live line names it. A search's waves all run in one wave of the suite's
        plan, so they are named by the search's own wave number and phase."""
        self.waves = state
        if state is not None and self.enabled:
            n = len(launch_ids)
            self.console.print(f"{_wave_name(state, long=True)}: {n} launch{'es at once' if n > 1 else ''}",
                               markup=False, highlight=False)

    def grow(self, n: int) -> None:
        """``n`` more Cases to run (a search makes its Cases wave by wave): the counts and the ETA
        take them in."""
        if n:
            self.lines.total += n
            self.progress.update(self.task, total=(self.progress.tasks[0].total or 0) + n)

    def _wave_prefix(self) -> str:
        st = self.waves
        return "" if st is None else f"[{_wave_name(st)}, {len(st.in_flight)} in flight] "

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def event(self, ev: dict) -> None:
        case = self.by_id.get(ev.get("case_id"))
        if ev["event"] == "start" and case is not None:
            self.progress.update(self.task, description=self._wave_prefix()
                                 + describe_case(case, with_size=case.bench not in self.own_sizes))
        elif ev["event"] == "done":
            if ev.get("status") not in ("ok", None):
                self.bad += 1
            self.progress.advance(self.task)
            if self.enabled:   # on a terminal the line lands above the live progress line
                row = self.row_of(ev.get("case_id")) if case is not None else None
                stored = _number((row or {}).get("size_bytes"))
                if stored is not None and int(stored) != case.size_bytes:
                    self.own_sizes.add(case.bench)
                self.lines.case_done(describe_case(case, row) if case is not None else str(ev.get("case_id")),
                                     str(ev.get("status", "")), headline(row))


def _wave_name(state, long: bool = False) -> str:
    """`wave 2 of 5` (`wave 2/5`), or a search's own `search wave 3 (match)`, numbered as its rows'
    `wave` column, `--dry-run` and accept number it (from 0)."""
    search = getattr(state, "search_wave", None)
    if search is not None:
        phase = getattr(state, "search_phase", "")
        return f"search wave {search}" + (f" ({phase})" if phase else "")
    return f"wave {state.index + 1}{' of ' if long else '/'}{state.total}"


def _group_headline(ok) -> tuple[str, str]:
    """(best, detail) of one (op, backend, variant) group's ok rows, by the columns they have:
    the fastest step (training), the fastest layer (MoE layer), the lowest p50 (latency ops), else
    the best busbw and the time at the smallest size. A step time has no busbw to rank by."""
    def col(name):
        return ok[name].astype(float) if name in ok.columns and ok[name].notna().any() else None

    step, layer, p50 = col("step_us"), col("layer_us"), col("latency_p50_us")
    if layer is not None:
        best = ok.loc[layer.idxmin()]
        overlap = _number(best.get("overlap_pct"))
        return f"layer {us(layer.min())}", (f"overlap {overlap:.0f}%" if overlap is not None else "")
    if step is not None:   # the timed step (time_us); the split's own step_us is a profiled batch's
        timed = col("time_us") if col("time_us") is not None else step
        best = ok.loc[timed.idxmin()]
        overlap, exposed = _number(best.get("overlap_pct")), _number(best.get("exposed_share_pct"))
        detail = [f"overlap {overlap:.0f}%"] if overlap is not None else []
        detail += [f"exposed {exposed:.0f}%"] if exposed is not None else []
        return f"step {us(timed.min())}", ", ".join(detail)
    if p50 is not None:
        best = ok.loc[p50.idxmin()]
        p99 = _number(best.get("latency_p99_us"))
        return f"p50 {us(p50.min())}", (f"p99 {us(p99)}" if p99 is not None else "")
    busbw, times = col("busbw_gbps"), col("time_us")
    best = f"{busbw.max():.2f} GB/s" if busbw is not None else "-"
    if times is None:
        return best, "-"
    small = ok.iloc[small_message_pick(ok["size_bytes"].tolist())]
    return best, f"{us(float(small['time_us']))} @ {format_size(int(small['size_bytes']))}"


def print_summary(console: Console | None, df, run_dir: Path, plots: list,
                  unstable: tuple[int, str] | None = None) -> None:
    """A table that fits 80 columns, one row per (op, backend, variant): sizes, ok rows of all,
    the best number and a detail (busbw and small-size time; step, layer or p50 for the families
    read by those), then the rows not ok, and how many points were unstable by the report's rule
    (``unstable``: (count, rule))."""
    console = console or make_console()
    if df is None or not len(df):
        console.print(f"[yellow]no rows recorded[/yellow] in {run_dir}")
        return
    console.print(f"{df['suite'].iloc[0]}: {len(df)} rows", markup=False, highlight=False)
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    split = split_columns(df)
    groups = list(df.groupby(["op", "backend", "variant", *split], sort=False))
    name_column(table, "op", [k[0] for k, _ in groups])
    name_column(table, "backend", [k[1] for k, _ in groups])
    with_variant = df["variant"].astype(str).nunique() > 1 or str(df["variant"].iloc[0]) != "default"
    if with_variant:
        name_column(table, "variant", [k[2] for k, _ in groups])
    for i, col in enumerate(split):
        name_column(table, col, [str(k[3 + i]) for k, _ in groups])
    for col in ("sizes", "ok", "best", "detail"):
        table.add_column(col, justify="right", no_wrap=True)
    for (op, backend, variant, *parts), g in groups:
        ok = g[g["status"] == "ok"]
        best, detail = _group_headline(ok) if len(ok) else ("-", "-")
        lo, hi = format_size(int(g["size_bytes"].min())), format_size(int(g["size_bytes"].max()))
        sizes = lo if lo == hi else f"{lo}-{hi}"
        cells = [str(op), str(backend), *([str(variant)] if with_variant else []), *map(str, parts), sizes,
                 f"{len(ok)}/{len(g)}", best, detail]
        table.add_row(*cells)
    console.print(table)
    not_ok = df[df["status"] != "ok"]
    for _, r in not_ok.head(5).iterrows():
        console.print(f"[yellow]{r['status']}[/yellow] {r['op']} {r['backend']} "
                      f"{format_size(int(r['size_bytes']))}: {escape(str(r['reason'])[:200])}", markup=True,
                      highlight=False)
    if len(not_ok) > 5:
        console.print(f"... and {len(not_ok) - 5} more rows not ok (see results.csv)")
    if unstable is not None:
        count, rule = unstable
        n_ok = int((df["status"] == "ok").sum())
        if count:   # the report's Warnings list them
            console.print(f"{count} of {n_ok} ok points unstable: {rule}", highlight=False)
        else:
            console.print(f"no unstable points ({rule})", highlight=False)
    console.print(f"results: {run_dir / 'results.csv'}", soft_wrap=True)
    if plots:
        console.print(f"plots:   {run_dir / 'plots'} ({len(plots)} files)", soft_wrap=True)
