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


def trace_path(run_dir: Path, case_id: str, rank: int) -> Path:
    return Path(run_dir) / "traces" / "torch" / f"{case_id}-rank{rank}.json"


class TorchCapture:
    """Wraps one timed batch of one rank in torch.profiler and writes its trace."""

    def __init__(self, run_dir: Path, case_id: str, rank: int, device: str, label: str):
        self.path = trace_path(run_dir, case_id, rank)
        self.run_dir = Path(run_dir)
        self.device, self.label = device, label
        self.note = ""
        self.written = False

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
            self.path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.path))
            self.written = True
        except Exception as exc:  # noqa: BLE001 - a lost trace must not lose the row
            self.note = f"torch trace not written: {type(exc).__name__}: {exc}"

    def result(self) -> dict:
        rel = str(self.path.relative_to(self.run_dir)) if self.written else ""
        return {"trace": rel, "note": self.note}
