"""The NVML reader (sysinfo/nvml_devices.py) over a stand-in NVML binding: what it returns, how
CUDA_VISIBLE_DEVICES narrows it, and the fallbacks when NVML is missing or fails."""
from types import SimpleNamespace

import pytest

from commbench.sysinfo import nvml_devices as nd

GIB = 1024**3


class FakeNvml:
    """The pynvml calls the reader makes, over a list of (name, uuid, total GiB, free GiB)."""

    def __init__(self, gpus, fail_init=False):
        self.gpus, self.fail_init, self.shut = gpus, fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][0].encode()   # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h][1]

    def nvmlDeviceGetMemoryInfo(self, h):
        if self.gpus[h][2] is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(total=int(self.gpus[h][2] * GIB), free=int(self.gpus[h][3] * GIB), used=0)


FOUR = [("NVIDIA H100 80GB HBM3", f"GPU-aaaa{i}-0000", 79.6, 79.0 - i) for i in range(4)]


def test_reads_count_names_and_memory():
    fake = FakeNvml(FOUR)
    gpus = nd.nvml_gpus(fake)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3" and gpus[3].free_bytes == int(76.0 * GIB)
    assert fake.shut


def test_unreadable_memory_is_unknown_not_an_error():
    gpus = nd.nvml_gpus(FakeNvml([("NVIDIA H200", "GPU-b", None, None)]))
    assert gpus[0].total_bytes is None and gpus[0].free_bytes is None


@pytest.mark.parametrize("visible, expected", [
    (None, [0, 1, 2, 3]),
    ("2,0", [2, 0]),
    ("", []),
    ("-1", []),
    ("1,7,2", [1]),          # CUDA stops at the first entry that names no GPU
    ("1,1", [1]),            # ...or names one twice
    ("GPU-aaaa3", [3]),      # a UUID prefix
    ("GPU-aaaa", []),        # a prefix of several GPUs names none
])
def test_cuda_visible_devices_as_cuda_applies_it(visible, expected):
    shown = nd.apply_visible(nd.nvml_gpus(FakeNvml(FOUR)), visible)
    assert [g.uuid for g in shown] == [FOUR[i][1] for i in expected]
    assert [g.index for g in shown] == list(range(len(expected)))   # renumbered as CUDA numbers them


def test_read_gpus_through_the_binding(monkeypatch):
    monkeypatch.setattr(nd, "_nvml_binding", lambda: (FakeNvml(FOUR), "pynvml"))
    seen = nd.read_gpus({"CUDA_VISIBLE_DEVICES": "0,1"})
    assert (seen.count, seen.source, seen.problem) == (2, "pynvml", "")


def test_nvml_failing_falls_back_to_the_driver_then_says_why(monkeypatch):
    monkeypatch.setattr(nd, "_nvml_binding", lambda: (FakeNvml(FOUR, fail_init=True), "nvml"))

    def no_lib(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(nd.ctypes, "CDLL", no_lib)
    seen = nd.read_gpus({})
    assert seen.count == 0 and seen.source == "none"
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in seen.problem and "libcuda.so.1" in seen.problem


def test_mig_instances_are_left_to_the_driver(monkeypatch):
    monkeypatch.setattr(nd, "_nvml_binding", lambda: (FakeNvml(FOUR), "pynvml"))
    calls = []

    def driver(lib):
        calls.append(lib)
        return [nd.GpuSeen(0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GIB)]

    monkeypatch.setattr(nd, "driver_gpus", driver)
    monkeypatch.setattr(nd.ctypes, "CDLL", lambda name: name)
    seen = nd.read_gpus({"CUDA_VISIBLE_DEVICES": "MIG-1234"})
    assert calls == ["libcuda.so.1"] and seen.source == "cuda-driver" and seen.count == 1
