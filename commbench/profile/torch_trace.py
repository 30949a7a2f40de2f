"""`--profile torch`: a torch.profiler (Kineto) trace of a Case's timed batch, per rank.

The profiler runs around the timed batch itself, so the trace shows exactly the
iterations whose times are reported; those times therefore include the
profiler's cost, and the row says so (``profiled`` = torch). Keep ``iters`` small
for profiled benchmarks (the trace holds every op of the batch). Traces go to
``traces/torch/<case_id>-rank<r>.json`` (Chrome trace format: Perfetto,
chrome://tracing, HTA). A profiler that fails to start or to write leaves the
measurement untouched and says why in ``profile_note``.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from ..runfolder import trace_files


class TorchCapture:
    """Wraps one timed batch of one rank in torch.profiler and writes its trace."""

    def __init__(self, run_dir: Path, case_id: str, rank: int, device: str, label: str):
        self.run_dir, self.case_id, self.rank = Path(run_dir), case_id, rank
        self.rel = ""   # the trace's path inside the run folder, once written
        self.device, self.label = device, label
        self.note = ""

    @contextmanager
    def batch(self):
        prof = None
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if self.device.startswith("cuda") and torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            prof = profile(activities=activities, record_shapes=False, with_stack=False)
            prof.__enter__()
        except Exception as exc:  # noqa: BLE001 - the Case is measured anyway, unprofiled
            prof = None
            self.note = f"torch profiler did not start: {type(exc).__name__}: {exc}"
        marker = None
        if prof is not None:
            from torch.profiler import record_function

            marker = record_function(self.label)   # names the batch in the trace, whatever the backend
            marker.__enter__()
        try:
            yield
        finally:
            if marker is not None:
                marker.__exit__(None, None, None)
            if prof is not None:
                self._finish(prof)

    def _finish(self, prof) -> None:
        try:
            prof.__exit__(None, None, None)
            self.rel = trace_files.write_torch(self.run_dir, self.case_id, self.rank, prof.export_chrome_trace)
        except Exception as exc:  # noqa: BLE001 - a lost trace must not lose the row
            self.note = f"torch trace not written: {type(exc).__name__}: {exc}"

    def result(self) -> dict:
        return {"trace": self.rel, "note": self.note}
