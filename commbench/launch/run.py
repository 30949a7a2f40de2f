"""The Run: one suite (read once, with its settings) measured into one run folder. `run`, `nccl` and
`accept SUITE` all start here (`Run.execute`); the CLI loads the Suite and hands it over.

A Run checks the machine before the first launch (the preflight), holds the folder and run.json,
runs the suite's waves (each launch group through group.py, whose attempts settle.py turns into
rows), and calls the caller's ``finish`` once every row is stored, the folder still held."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..runfolder import RunFolder
from ..suite import Suite
from ..world import inside_mpi_job
from .extras import require_torch_for
from .group import GroupContext, launch_record, run_group
from .preflight import check_preflight, enforce, record_preflight
from .prepare import close_meta, open_meta, prepare_folder, record_unsupported, write_plan
from .rank_records import merge_rank_records
from .search_run import health_of_folder, run_search
from .waves import WaveState, pending_waves, plan_waves, run_wave, waves_on

# What the caller does with a stored run before the folder is released (plots, summary, report).
Finish = Callable[[RunFolder, object], None]


@dataclass(frozen=True)
class RunOptions:
    """How a Run starts. ``overrides``: the `--set`/`--only` the Suite was loaded with (recorded).
    ``force`` lets a --resume continue with settings that differ from the folder's."""

    resume: bool = False
    force: bool = False
    overrides: dict | None = None
    show_progress: bool = True
    console: object = None
    finish: Finish | None = None
    accept: bool = False      # the preflight holds the node to the suite's shape strictly (exit 1)
    share_gpu: bool = False   # `--share-gpu`: ranks may share a GPU (as the suite key share_gpu)


class Run:
    """A Suite being measured into ``folder`` (held by this process until the Run ends)."""

    def __init__(self, suite: Suite, folder: RunFolder, options: RunOptions, preflight=None):
        self.suite, self.folder, self.options, self.preflight = suite, folder, options, preflight
        self.by_id = {c.case_id: c for c in suite.cases}
        self.meta: dict = {}
        self.done: set[str] = set()

    @staticmethod
    def execute(suite: Suite, out_dir: Path | None, options: RunOptions = RunOptions()) -> Path:
        """Measure ``suite`` into ``out_dir`` (a new folder under results/ when None); the folder."""
        if inside_mpi_job():
            from .inprocess import run_suite_inside_mpi

            return run_suite_inside_mpi(suite, out_dir, options)
        require_torch_for(suite)
        pre = check_preflight(suite, accept=options.accept, share_gpu=options.share_gpu)
        enforce(pre)   # a node short of the suite's shape or without a GPU stops here, before any folder
        folder = prepare_folder(suite, out_dir, options.resume)
        try:
            return Run(suite, folder, options, pre)._measure()
        finally:
            folder.release()

    def _open(self) -> None:
        o = self.options
        self.meta = open_meta(self.folder, self.suite, resume=o.resume, overrides=o.overrides, force=o.force,
                              own_ranks=max((l.ranks_per_node for l in self.suite.launches), default=0))
        self.folder.write_meta(self.meta)
        self.done = self.folder.done_case_ids() if o.resume else set()
        self.done |= record_unsupported(self.folder, self.suite, self.done)
        if self.preflight is not None:   # Cases the node cannot run (more ranks than GPUs, no GPU)
            self.meta["preflight"] = self.preflight.to_json()
            self.folder.write_meta(self.meta)
            self.done |= record_preflight(self.folder, self.suite, self.preflight, self.done)

    def _measure(self) -> Path:
        from ..ui import RunDisplay

        self._open()
        todo = [c for c in self.suite.cases if c.case_id not in self.done]
        display = RunDisplay(self.options.console, total=len(todo), enabled=self.options.show_progress,
                             by_id=self.by_id, row_of=self.folder.latest_row)
        with display:
            self._waves(display)
        close_meta(self.meta)
        merge_rank_records(self.folder, self.meta)
        self.folder.write_meta(self.meta)
        if self.options.finish is not None:
            self.options.finish(self.folder, self.options.console)
        return self.folder.path

    def _waves(self, display) -> None:
        launches = self.suite.launches
        next_id = max((l.launch_id for l in launches), default=-1) + 1   # a search's launches come after
        total = len(plan_waves(launches))
        for index, wave in pending_waves(launches, self.done):
            if wave[0].search:   # placement: search: its waves are chosen as it runs
                next_id = self._search(wave[0], display, index, total, next_id)
                continue
            self._wave([(l, self._pending(l)) for l in wave], display, index, total)

    def _pending(self, launch) -> list[str]:
        return [c for c in launch.case_ids if c not in self.done]

    def _search(self, launch, display, index: int, total: int, next_id: int) -> int:
        """A placement: search template run wave by wave (search_run.py); returns the next launch id."""
        from ..runfolder.reader import load_samples

        templates = [self.by_id[c] for c in launch.case_ids if c not in self.done]
        if not templates:
            return next_id
        record: dict = {}
        self.meta.setdefault("searches", []).append(record)

        def run_one_wave(launches, cases, phase):
            self.by_id.update({c.case_id: c for c in cases})   # the ranks and the live display look them up
            todo = [(l, p) for l in launches if (p := self._pending(l))]
            if not todo:   # a --resume replaying a wave it already ran
                return
            write_plan(self.folder, Suite(self.suite.name, self.suite.path, cases, launches,
                                          self.suite.settings), resume=True)
            display.grow(sum(len(p) for _l, p in todo))   # a search's Cases are made wave by wave
            extra = {"search_wave": cases[0].param("wave"), "search_phase": phase}
            for part in ([todo] if waves_on() else [[job] for job in todo]):   # COMMBENCH_WAVES=0: one by one
                self._wave(part, display, index, total, extra=extra)

        folder = self.folder
        return run_search(launch, templates, next_id, run_one_wave,
                          lambda ids: [r for r in folder.latest_rows() if r.get("case_id") in ids], record,
                          samples_of=lambda: load_samples(folder.path), health_of=health_of_folder(folder.path))

    def _records(self, launches: list, index: int, extra: dict | None) -> list[dict]:
        records = []
        for launch, pending in launches:
            record = launch_record(launch, held_off=not self.by_id[pending[0]].param("allow_multicast"))
            record.update(wave=index, **(extra or {}))
            self.meta["launches"].append(record)
            records.append(record)
        self.folder.write_meta(self.meta)   # recorded as they start: a run killed mid-wave keeps them
        return records

    def _wave(self, launches: list, display, index: int, total: int, extra: dict | None = None) -> None:
        """Run a wave's launches (each with its pending Cases) at the same time; a single launch runs
        alone in this thread. The wave's time limit (``wave_timeout``) kills a launch still running
        then; its Cases left end as timeout rows."""
        limit_s = self.suite.settings.wave_timeout_s
        records = self._records(launches, index, extra)
        concurrent = len(launches) > 1
        ctx = GroupContext(self.folder, self.by_id, display, retries=self.suite.settings.launch_retries,
                           deadline=time.time() + limit_s if limit_s else None,
                           cancel=threading.Event() if concurrent else None)
        if concurrent:
            ctx.lock = threading.Lock()
        search = (extra or {}).get("search_wave")
        state = WaveState(index=index, total=total, search_wave=search,
                          search_phase=str((extra or {}).get("search_phase", "")))
        shown = (concurrent or search is not None) and hasattr(display, "wave")   # a search's waves: always
        if shown:
            display.wave(state, [l.launch_id for l, _ in launches])
        results = self._run_concurrently(ctx, list(zip(launches, records)), state, concurrent)
        if shown:
            display.wave(None, [])
        merge_rank_records(self.folder, self.meta, [launch.launch_id for launch, _pending in launches])
        self.folder.write_meta(self.meta)
        errors = [r.error for r in results if r.error is not None]
        if errors:   # StorageFull, an interrupt, a broken folder: the run stops after the whole wave
            raise errors[0]

    def _run_concurrently(self, ctx: GroupContext, jobs: list, state: WaveState, concurrent: bool) -> list:
        folder = self.folder
        was_shared = folder.shared
        folder.shared = concurrent or was_shared   # other launches' rank 0s append too: take the writers' lock
        try:
            results = run_wave(jobs, lambda job: run_group(ctx, job[0][0], job[0][1], job[1]),
                               state=state, key=lambda job: job[0][0].launch_id, cancel=ctx.cancel)
        finally:
            folder.shared = was_shared
        if concurrent:   # every launch of the wave has ended: no rank writes the folder now
            folder.keep_samples(folder.done_case_ids())
            folder.rewrite_csv()
        return results
