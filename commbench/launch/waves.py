"""Waves: launches whose host sets are disjoint run at the same time.

A placed benchmark (`placement: per_node` or `pairs`) has one launch per host group; groups that
share no host go into one wave (every node's per_node launch; one round of disjoint pairs). A
launch without named hosts is a wave of its own, so unplaced suites run one launch after another
as before. ``run_wave`` runs any list of jobs concurrently, one thread each (each thread only
waits on its launcher process); a job that raises ends as its own error, never the others'.
"""
from __future__ import annotations

import math
import os
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..units import parse_duration


WAVES_VAR = "COMMBENCH_WAVES"   # "0": every launch a wave alone, as before waves (for comparisons)
PREVIEW_WAVES = 4   # a --dry-run shows a search's first waves (those of a run in which every group passes)


def waves_on() -> bool:
    """False when COMMBENCH_WAVES turns waves off (every launch then runs alone)."""
    return os.environ.get(WAVES_VAR, "").strip() not in ("0", "off", "no", "false")


def plan_waves(launches: Sequence) -> list[list]:
    """Consecutive launches packed into waves: a placed launch joins the current wave when its
    hosts are disjoint from every host already in it; an unplaced launch is a wave alone."""
    if not waves_on():
        return [[launch] for launch in launches]
    waves: list[list] = []
    busy: set[str] = set()
    for launch in launches:
        hosts = set(launch.hosts)
        if launch.search:   # placement: search: a wave of its own, whose waves are chosen as it runs
            waves.append([launch])
            busy = set()
            continue
        if hosts and waves and busy and not (hosts & busy) and waves[-1][0].hosts:
            waves[-1].append(launch)
            busy |= hosts
            continue
        waves.append([launch])
        busy = hosts
    return waves


def pending_waves(launches: Sequence, done: set[str]) -> list[tuple[int, list]]:
    """(wave index, launches with Cases left) for each wave not finished; a run interrupted
    mid-wave resumes with that wave's missing launches only (indices stay those of the plan)."""
    out = []
    for index, wave in enumerate(plan_waves(launches)):
        left = [l for l in wave if any(cid not in done for cid in l.case_ids)]
        if left:
            out.append((index, left))
    return out


@dataclass
class JobResult:
    value: object = None
    error: BaseException | None = None


@dataclass
class WaveState:
    """What the live display shows: the wave running and its launches in flight; in a
    ``placement: search`` the search's own wave (its ``wave`` column) and the planner's phase."""
    index: int = 0
    total: int = 0
    in_flight: set = field(default_factory=set)
    search_wave: int | None = None
    search_phase: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_wave(jobs: Sequence, run_one: Callable[[object], object], *, state: WaveState | None = None,
             key: Callable[[object], object] = id, cancel: threading.Event | None = None) -> list[JobResult]:
    """Run ``run_one(job)`` for every job at the same time; wait for all; one JobResult per job,
    in order. On Ctrl-C (or SIGTERM turned into it) ``cancel`` is set, so that each job kills its
    own launch (``run_launch(cancel=...)``), and the interrupt propagates once every job ended."""
    results = [JobResult() for _ in jobs]
    if len(jobs) == 1:   # no thread: an unplaced launch runs exactly as it always did
        _flying(state, key(jobs[0]), True)
        try:
            results[0].value = run_one(jobs[0])
        finally:
            _flying(state, key(jobs[0]), False)
        return results

    def work(i: int, job) -> None:
        _flying(state, key(job), True)
        try:
            results[i].value = run_one(job)
        except BaseException as exc:  # noqa: BLE001 - a job's failure (any kind) is its own, kept in its result
            results[i].error = exc
        finally:
            _flying(state, key(job), False)

    threads = [threading.Thread(target=work, args=(i, j), daemon=True, name=f"wave-job-{i}")
               for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        if cancel is not None:
            cancel.set()
        for t in threads:
            t.join()
        raise
    return results


def _flying(state: WaveState | None, job_key, started: bool) -> None:
    """Count a job in (or out of) the wave's launches in flight."""
    if state is None:
        return
    with state.lock:
        (state.in_flight.add if started else state.in_flight.discard)(job_key)


# -- pricing a schedule (`--dry-run`) --

@dataclass
class Estimate:
    launch_s: float                          # per-launch overhead (start, MPI init, imports)
    case_s: dict = field(default_factory=dict)  # case_id -> seconds measured before
    source: str = ""

    def launch_wall_s(self, launch) -> float:
        return self.launch_s + sum(self.case_s.get(cid, 0.0) for cid in launch.case_ids)


def estimate_from_run(meta: dict, rows: list[dict], source: str, where: str = "run.json") -> Estimate:
    """From a previous run folder: each Case's time (time_us x (warmup + iters) of its row) and
    the per-launch cost, the median over its launches of wall_s less their Cases' time (a
    launch's rows name its log). A run.json (``where``) whose launches are not launch records is
    a RunFolderError naming it; a row without numbers prices nothing."""
    case_s, by_log = {}, {}
    for r in rows:
        t_us, n = r.get("time_us"), _number(r.get("warmup")) + _number(r.get("iters"))
        if _number(t_us) < 0 or _number(r.get("warmup")) < 0 or _number(r.get("iters")) < 0:
            from ..errors import RunFolderError, preview

            raise RunFolderError(f"{source}: the row of Case {preview(r.get('case_id'))} has a negative time_us, "
                                 "warmup or iters (the folder is damaged or not commbench's)")
        if _number(t_us) and n and isinstance(r.get("case_id"), str):
            case_s[r["case_id"]] = float(t_us) * n / 1e6
            by_log[r.get("log")] = by_log.get(r.get("log"), 0.0) + case_s[r["case_id"]]
    costs = [max(0.0, float(l["wall_s"]) - by_log.get(l.get("log"), 0.0))
             for l in _launch_records(meta, where) if l.get("wall_s")]
    return Estimate(statistics.median(costs) if costs else 0.0, case_s, source)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value) -> float:
    """A finite number, else 0 (a row's cell that is missing or damaged)."""
    return float(value) if _is_number(value) else 0.0


def _launch_records(meta: dict, where: str) -> list[dict]:
    from ..errors import RunFolderError, preview

    launches = meta.get("launches", [])
    if not isinstance(launches, list):
        raise RunFolderError(f"{where}: launches {preview(launches)} is not a list of launch records "
                             "(the file is damaged or not commbench's)")
    for i, l in enumerate(launches):
        if not isinstance(l, dict) or not (l.get("wall_s") is None or (_is_number(l["wall_s"]) and l["wall_s"] >= 0)):
            raise RunFolderError(f"{where}: launches[{i}] {preview(l)} is not a launch record with wall_s "
                                 "in seconds, 0 or more (the file is damaged or not commbench's)")
    return launches


def schedule_lines(launches: Sequence, estimate: Estimate | None) -> list[str]:
    """The schedule as text: one line per wave (launches, Cases per launch, projected wall time)
    and the totals, waves against one launch after another."""
    waves = plan_waves(launches)
    lines, total_s, serial_s, n_waves, n_launches = [], 0.0, 0.0, len(waves), len(launches)
    for i, wave in enumerate(waves):
        if wave[0].search:
            text, wall_s, serial, worst, shown = _search_lines(wave[0], estimate)
            lines += text
            total_s += wall_s
            serial_s += serial
            n_waves, n_launches = n_waves + worst - 1, n_launches + shown - 1
            continue
        cases = [len(l.case_ids) for l in wave]
        hosts = sorted({h for l in wave for h in l.hosts})
        text = (f"wave {i}: {len(wave)} launch{'es' if len(wave) != 1 else ''}, "
                f"{min(cases)}-{max(cases) if min(cases) != max(cases) else ''}".rstrip("-")
                + f" Case{'s' if max(cases) != 1 else ''} per launch"
                + (f" on {len(hosts)} host{'s' if len(hosts) != 1 else ''}" if hosts else ""))
        if estimate is not None:
            walls = [estimate.launch_wall_s(l) for l in wave]
            total_s += max(walls)
            serial_s += sum(walls)
            text += f", ~{_hms(max(walls))}"
        lines.append(text)
    summary = (f"{n_waves} waves, {n_launches} launches, {sum(len(l.case_ids) for l in launches)} Cases"
               + (" (a search: its worst case in waves, its first waves' launches)"
                  if any(l.search for l in launches) else ""))
    if estimate is not None:
        summary += (f"; projected wall time {_hms(total_s)} (one launch after another: {_hms(serial_s)}; "
                    f"{estimate.source})")
    return lines + [summary]


def _search_lines(launch, estimate: Estimate | None) -> tuple[list[str], float, float, int, int]:
    """A search's schedule: its first waves (every group passing), and its worst-case waves; the
    projected time counts the worst case at the cost of one group's launch a wave."""
    from ..placement.search_plan import SETTINGS, preview, worst_case_waves

    settings = {k: v for k, v in launch.search if k in SETTINGS}
    cases = len(launch.case_ids)
    lines = [f"search over {len(launch.hosts)} hosts ({cases} Case{'s' if cases != 1 else ''} per launch), "
             f"waves chosen from the last one's results; the first ones when every group passes:"]
    shown = preview(launch.hosts, PREVIEW_WAVES, **settings)
    launches = 0
    for j, (phase, groups) in enumerate(shown):
        sizes = sorted({len(g) for g in groups})
        launches += len(groups)
        lines.append(f"  search wave {j} ({phase}): {len(groups)} launch{'es' if len(groups) != 1 else ''} "
                     f"of {'-'.join(map(str, sizes[::max(1, len(sizes) - 1)]))} host(s)")
    worst = worst_case_waves(**{k: v for k, v in settings.items() if k != "seed"})
    text = f"  at most about {worst} waves (a few bad parts; suspects that find a proven-good partner)"
    wall_s = serial_s = 0.0
    if estimate is not None:
        one = estimate.launch_s + sum(estimate.case_s.get(cid, 0.0) for cid in launch.case_ids)
        wall_s, serial_s = worst * one, max(launches, 1) * one
        text += f", ~{_hms(wall_s)}"
    return lines + [text], wall_s, serial_s, worst, launches


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def price(launches: Sequence, launch_cost: str | None = None, estimate_from=None) -> list[str]:
    """``schedule_lines`` with the estimate the user asked for: a per-launch cost (`--launch-cost`),
    or a previous run folder's launches and Case times (`--estimate-from`), or none (no times).
    A folder that is not a run folder, is damaged, or measured none of these launches' Cases is a
    CommbenchError naming --estimate-from (exit 2): it would price the schedule at nothing."""
    estimate = None
    if estimate_from is not None:
        estimate = _estimate_from_folder(estimate_from, launches)
    if launch_cost is not None:   # a ValueError from here on is --launch-cost's (the CLI names it)
        cost = parse_duration(launch_cost, allow_zero=True)
        estimate = (Estimate(cost, estimate.case_s, f"{estimate.source}, --launch-cost {launch_cost}")
                    if estimate else Estimate(cost, {}, f"--launch-cost {launch_cost} per launch"))
    return schedule_lines(launches, estimate)


def _estimate_from_folder(folder, launches: Sequence) -> Estimate:
    from ..errors import CommbenchError, RunFolderError
    from ..runfolder import RunFolder, read_meta

    flag = f"--estimate-from {folder}"
    path = Path(folder)
    meta_path = path / "run.json"
    if not path.is_dir() or not meta_path.is_file() or meta_path.is_symlink():
        raise RunFolderError(f"{flag}: not a run folder (it holds no run.json): give the folder of an earlier "
                             "`commbench run` of this suite")
    try:
        meta = read_meta(path)
        _launch_records(meta, str(meta_path))
        if not isinstance(meta.get("suite"), str):
            raise RunFolderError(f"{meta_path}: names no suite: not a run.json commbench wrote")
        if not any(os.path.lexists(path / name) for name in ("results.jsonl", "results.csv")):
            raise RunFolderError(f"{path}: holds no results: not a run folder")
        estimate = estimate_from_run(meta, RunFolder(path).latest_rows(), f"estimated from {folder}",
                                     str(meta_path))
    except CommbenchError as exc:
        raise RunFolderError(f"{flag}: {exc}") from None
    wanted = {cid for launch in launches if not launch.search for cid in launch.case_ids}   # a search's own vary
    if wanted and not wanted & set(estimate.case_s):
        raise RunFolderError(f"{flag}: none of the {len(wanted)} Cases to run were measured there (it ran "
                             f"suite {meta['suite']!r}): give a run folder of this suite, or price with "
                             "--launch-cost")
    return estimate
