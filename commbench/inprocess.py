"""Inside an MPI job (`mpiexec -n 8 commbench run suite.yaml`): this process is a rank.

Each launch group runs in these same processes, in order, with its environment
variant applied to os.environ (kill switches stay locked). Groups whose rank
count differs from the job's size are recorded as skipped. There is no
watchdog here: the job scheduler's time limit is the backstop.
"""
from __future__ import annotations

import os
from pathlib import Path

from .orchestrate import _now, _row_for, base_meta, prepare_folder, write_plan
from .results import RunFolder
from .runner import Progress, run_cases
from .safety import protect_env
from .suite import load_suite
from .world import build_world


def run_suite_inside_mpi(suite_path: Path, out_dir: Path | None, *, resume: bool) -> Path:
    world = build_world()
    suite = load_suite(suite_path)
    path = None
    if world.is_root:
        folder = prepare_folder(suite, out_dir, resume)
        write_plan(folder, suite)
        meta = base_meta(suite, _now())
        meta["hosts"] = sorted(set(world.hosts))
        folder.write_meta(meta)
        path = str(folder.path)
    path = world.bcast(path)
    folder = RunFolder(Path(path))
    done = world.bcast(folder.done_case_ids() if (resume and world.is_root) else set())
    by_id = {c.case_id: c for c in suite.cases}
    log = "logs/inprocess.log"
    for launch in suite.launches:
        cases = [by_id[cid] for cid in launch.case_ids if cid not in done]
        if not cases:
            continue
        if launch.ranks != world.size:
            if world.is_root:
                for c in cases:
                    folder.append_row(_row_for(c, "skipped", f"needs {launch.ranks} ranks; this MPI job has "
                                               f"{world.size} (start it with -n {launch.ranks})", log, launch.ranks))
            continue
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(protect_env(dict(launch.env), saved))
        try:
            run_cases(cases, world, folder, log, Progress(folder.path / "logs" / "inprocess.progress.jsonl"))
        finally:
            os.environ.clear()
            os.environ.update(saved)
    world.barrier()
    if world.is_root:
        meta = folder.read_meta()
        meta["finished_utc"] = _now()
        folder.write_meta(meta)
        from .orchestrate import finish

        finish(folder, None)
    return folder.path
