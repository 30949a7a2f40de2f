"""System information: guarded probes, the environment allow-list, parsers on saved tool output."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from rich.console import Console

from commbench.sysinfo import machine as sysinfo
from commbench.sysinfo.view import format_info

GPU_FIELDS = ("gpus", "driver", "cuda_driver", "cuda_runtime", "topology", "nvlink", "multicast_supported")
REQUIRED = (
    "hostname", "os", "python", "commbench_version", "git_revision", "torch", "torch_cuda", "nccl",
    "nvshmem", "mpi", "cupy", "cuda_core", "kill_switches",
) + GPU_FIELDS

SMI_GPUS = """\
0, NVIDIA H200, GPU-0a1b2c3d-0000-1111-2222-333344445555, 143771, 9.0, 00000000:19:00.0, 580.95.05
1, NVIDIA H200, GPU-0a1b2c3d-0000-1111-2222-333344446666, 143771, 9.0, 00000000:3B:00.0, 580.95.05
"""

SMI_NVLINK = """\
GPU 0: NVIDIA H200 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA H200 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344446666)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
\t Link 2: <inactive>
"""


@pytest.fixture
def no_gpu(monkeypatch):
    """Make the host look GPU-less even on a GPU machine: no nvidia-smi, no driver."""
    real_which = sysinfo.shutil.which
    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: None if name == "nvidia-smi" else real_which(name))

    def no_driver():
        raise ImportError("cuda-bindings not installed")

    def no_proc():
        raise FileNotFoundError("/proc/driver/nvidia/version")

    monkeypatch.setattr(sysinfo, "_cuda_driver", no_driver)
    monkeypatch.setattr(sysinfo, "_proc_driver", no_proc)


def test_collect_without_gpu_probe_has_all_keys_and_is_json():
    info = sysinfo.collect(probe_gpu=False)
    assert set(REQUIRED) <= set(info)
    for key in GPU_FIELDS:
        assert info[key] is None, key
    assert info["commbench_version"] == sysinfo.__version__
    assert json.loads(json.dumps(info)) == info


def test_collect_on_gpu_less_host_is_fast_and_gives_none(no_gpu):
    start = time.monotonic()
    info = sysinfo.collect()
    assert time.monotonic() - start < 3.0
    for key in GPU_FIELDS:
        assert info[key] is None, key
    json.dumps(info)


def test_hanging_or_failing_tools_become_none(monkeypatch):
    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: f"/usr/bin/{name}")

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout", 0))

    monkeypatch.setattr(sysinfo.subprocess, "run", hang)
    monkeypatch.setattr(sysinfo, "_cuda_driver", lambda: None)
    info = sysinfo.collect()
    assert info["gpus"] is None and info["topology"] is None and info["nvlink"] is None
    assert info["git_revision"] is None
    assert info["multicast_supported"] is None


def test_nvidia_smi_output_is_used(monkeypatch):
    outputs = {"--query-gpu": SMI_GPUS, "topo": "\tGPU0\tGPU1\nGPU0\t X \tNV18\n", "nvlink": SMI_NVLINK}

    def fake_run(argv, **kwargs):
        text = next((v for k, v in outputs.items() if argv[0] == "nvidia-smi" and argv[1].startswith(k)), None)
        if text is None:
            return subprocess.CompletedProcess(argv, 1, "", "")
        return subprocess.CompletedProcess(argv, 0, text, "")

    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(sysinfo.subprocess, "run", fake_run)
    monkeypatch.setattr(sysinfo, "_cuda_driver", lambda: None)
    info = sysinfo.collect()
    assert [g["pci_bus_id"] for g in info["gpus"]] == ["00000000:19:00.0", "00000000:3B:00.0"]
    assert info["driver"] == "580.95.05"
    assert all("driver" not in g for g in info["gpus"])
    assert info["topology"].endswith("NV18")
    assert [(g["links"], g["active"]) for g in info["nvlink"]] == [(3, 2), (3, 1)]
    text = _render(info)
    assert "NVIDIA H200" in text and "2/3" in text and "NV18" in text


def test_parse_gpu_csv():
    gpus = sysinfo.parse_gpu_csv(SMI_GPUS + "2, Broken, GPU-x, [N/A], [N/A], 0000:00:01.0, 1\ngarbage line\n")
    assert len(gpus) == 3
    assert gpus[0] == {
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
        "memory_total_mib": 143771, "compute_capability": "9.0", "pci_bus_id": "00000000:19:00.0",
        "driver": "580.95.05",
    }
    assert gpus[2]["memory_total_mib"] is None and gpus[2]["compute_capability"] is None


def test_parse_nvlink_status():
    links = sysinfo.parse_nvlink_status(SMI_NVLINK)
    assert links[0] == {"index": 0, "links": 3, "active": 2, "link_gbps": [26.562, 26.562]}
    assert links[1]["active"] == 1
    assert sysinfo.parse_nvlink_status("GPU 0: NVIDIA H200 (UUID: GPU-1)\n") is None


def test_parse_nvshmem_header():
    header = (
        "#ifndef NVSHMEM_VERSION_H\n#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n"
        "#define NVSHMEM_VENDOR_MINOR_VERSION 4\n#define NVSHMEM_VENDOR_PATCH_VERSION 5\n#endif\n"
    )
    assert sysinfo.parse_nvshmem_header(header) == "3.4.5"
    assert sysinfo.parse_nvshmem_header("#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n") is None


def test_filtered_env_keeps_allow_list_only():
    env = {
        "AWS_SECRET_ACCESS_KEY": "s3cr3t", "HOME": "/root", "PATH": "/usr/bin", "GITHUB_TOKEN": "t",
        "OMPI_COMM_WORLD_RANK": "0", "MY_NCCL_DEBUG": "x", "nccl_debug": "lower",
        "NCCL_DEBUG": "INFO", "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1",
        "CUDA_VISIBLE_DEVICES": "0,1", "UCX_TLS": "rc", "OMPI_MCA_btl": "^openib",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "COMMBENCH_JIT_CACHE": "/tmp/jit",
    }
    kept = sysinfo.filtered_env(env)
    prefixes = {"NCCL", "NVSHMEM", "CUDA", "UCX", "TORCH", "COMMBENCH"}
    assert kept == {k: v for k, v in env.items() if k.split("_")[0] in prefixes or k.startswith("OMPI_MCA_")}
    assert "AWS_SECRET_ACCESS_KEY" not in kept and "HOME" not in kept and "OMPI_COMM_WORLD_RANK" not in kept
    assert kept["NCCL_DEBUG"] == "INFO"


def test_filtered_env_defaults_to_process_env(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "TUNING")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    kept = sysinfo.filtered_env()
    assert kept["NCCL_DEBUG_SUBSYS"] == "TUNING"
    assert "AWS_SECRET_ACCESS_KEY" not in kept and "HOME" not in kept


def test_kill_switches_reported(monkeypatch, no_gpu):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "1")
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    info = sysinfo.collect(probe_gpu=False)
    assert info["kill_switches"] == {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}


def test_versions_match_installed_packages_without_heavy_imports():
    torch_was_loaded, mpi_was_loaded = "torch" in sys.modules, "mpi4py.MPI" in sys.modules
    info = sysinfo.collect(probe_gpu=False)
    try:
        assert info["torch"] == metadata.version("torch")
    except metadata.PackageNotFoundError:
        assert info["torch"] is None
    try:
        mpi4py_version = metadata.version("mpi4py")
    except metadata.PackageNotFoundError:
        assert info["mpi"] is None
    else:
        assert info["mpi"]["mpi4py"] == mpi4py_version
        assert info["mpi"]["library"] and "\0" not in info["mpi"]["library"]
    # Importing torch costs seconds and importing mpi4py.MPI would initialise MPI.
    assert ("torch" in sys.modules) == torch_was_loaded
    assert ("mpi4py.MPI" in sys.modules) == mpi_was_loaded


def _render(info: dict) -> str:
    console = Console(record=True, width=200)
    console.print(format_info(info))
    return console.export_text()


def test_format_info_without_gpu():
    info = sysinfo.collect(probe_gpu=False)
    text = _render(info)
    assert "commbench info" in text and "none visible" in text and info["hostname"] in text
    assert "multicast supported  unknown" in text


class FakeDriver:
    """Stands in for cuda.bindings.driver: two H200s, only device 0 reports multicast."""

    CUdevice_attribute = int
    ATTRS = {75: 9, 76: 0}

    def cuDeviceGetCount(self):
        return 0, 2

    def cuDriverGetVersion(self):
        return 0, 13000

    def cuDeviceGet(self, i):
        return 0, i

    def cuDeviceGetAttribute(self, attr, dev):
        return 0, (int(dev == 0) if attr == 132 else self.ATTRS[attr])

    def cuDeviceGetName(self, length, dev):
        return 0, b"NVIDIA H200" + b"\0" * (length - 11)

    def cuDeviceGetUuid(self, dev):
        return 0, type("CUuuid", (), {"bytes": bytes(range(dev, dev + 16))})()

    def cuDeviceTotalMem(self, dev):
        return 0, 143771 * 2**20

    def cuDeviceGetPCIBusId(self, length, dev):
        return 0, f"0000:{0x19 + dev:02X}:00.0".encode() + b"\0"


def test_driver_query_gives_gpus_and_multicast(monkeypatch, no_gpu):
    monkeypatch.setattr(sysinfo, "_cuda_driver", FakeDriver)
    assert sysinfo.multicast_supported() == [True, False]
    info = sysinfo.collect()
    assert info["multicast_supported"] == [True, False]
    assert info["cuda_driver"] == "13.0"
    assert info["gpus"][1] == {
        "index": 1, "name": "NVIDIA H200", "uuid": "GPU-01020304-0506-0708-090a-0b0c0d0e0f10",
        "memory_total_mib": 143771, "compute_capability": "9.0", "pci_bus_id": "0000:1A:00.0",
    }
    assert "multicast supported  True False" in _render(info)


@pytest.mark.skipif(shutil.which("bash") is None, reason="the sbatch templates are bash scripts")
@pytest.mark.parametrize("template", ["single-node", "multi-node"])
@pytest.mark.parametrize("mode", ["ranks", "orchestrate"])
def test_slurm_templates_start_ranks_with_kill_switches(tmp_path, template, mode):
    """Run a template outside Slurm with a recording `srun` and commbench in its place."""
    record = tmp_path / "calls"
    for tool in ("srun", "cb"):
        script = tmp_path / tool
        script.write_text(
            f'#!/bin/bash\necho "{tool} $* | $NCCL_NVLS_ENABLE $NVSHMEM_DISABLE_NVLS '
            f'$TORCH_SYMM_MEM_DISABLE_MULTICAST" >> {record}\n'
            '[[ "$*" == "info --srun-mpi" ]] && echo pmix\n'
            'exit 0\n')
        script.chmod(0o755)
    repo = Path(sysinfo.__file__).resolve().parents[2]
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "77",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "8", "COMMBENCH": str(tmp_path / "cb"),
           "SLURM_CPUS_PER_TASK": "8", "MODE": mode, "SUITE": "suites/nvshmem.yaml", "OUT": "results/x"}
    done = subprocess.run(["bash", str(repo / "slurm" / f"{template}.sbatch")], env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    calls = record.read_text().splitlines()
    run = [c for c in calls if "run suites/nvshmem.yaml --out results/x" in c]
    assert len(run) == 1 and run[0].endswith("| 0 1 1")
    if mode == "ranks":
        assert run[0].startswith("srun --nodes=2 --kill-on-bad-exit=1 --ntasks-per-node=8 --mpi=pmix "
                                 f"--cpus-per-task=8 {tmp_path}/cb run")
    else:
        assert run[0].startswith("cb run")


def test_nvshmem_version_from_header_when_no_package(monkeypatch, tmp_path):
    header = tmp_path / "include" / "non_abi" / "nvshmem_version.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 2\n"
                      "#define NVSHMEM_VENDOR_PATCH_VERSION 5\n")
    monkeypatch.setattr(sysinfo, "_dist_version", lambda *names: None)
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    assert sysinfo._nvshmem() == {"library": "3.2.5", "source": str(header), "nvshmem4py": None}
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path / "missing"))
    monkeypatch.setattr(sysinfo, "find_spec", lambda name: None)
    assert sysinfo._nvshmem() is None


def test_a_repeat_does_not_count_its_own_previous_repeat_as_load(monkeypatch):
    """Two ranks just ended (load 2.4 on 2 CPUs): before the next repeat, 10 s later, that is ours."""
    from commbench.sysinfo import load

    monkeypatch.setattr(load, "gpu_processes", lambda pids=None: [])
    monkeypatch.setattr(load, "_last_snapshot", [])
    monkeypatch.setattr(load.os, "getloadavg", lambda: (2.4, 1.0, 0.5))
    clock = iter([100.0, 200.0, 210.0])
    monkeypatch.setattr(load.time, "monotonic", lambda: next(clock))
    first = load.snapshot()          # the first run of this process: nothing of ours before it
    assert "own_previous_s" not in first
    load.snapshot()                  # its "after"
    second = load.snapshot()         # the next repeat's "before", 10 s later
    assert second["own_previous_s"] == 10.0
    for snap in (first, second):
        snap["cpus_usable"] = 2
    assert load.busy_reasons({"before": second, "own_ranks": 2}) == []          # 2.4 - 2 e^(-1/6) < 1
    assert load.busy_reasons({"before": first, "own_ranks": 2})                 # a stranger's load
    second["own_previous_s"] = 600.0                                             # long gone: not ours
    assert load.busy_reasons({"before": second, "own_ranks": 2})


def test_kill_switches_read_from_the_c_environment(monkeypatch, no_gpu):
    """A switch set through libc setenv (as a C library would) is what NCCL honours: run.json says so."""
    import ctypes

    libc = ctypes.CDLL(None)
    for k in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        monkeypatch.delenv(k, raising=False)
    libc.setenv(b"NCCL_NVLS_ENABLE", b"0", 1)
    try:
        assert "NCCL_NVLS_ENABLE" not in os.environ
        assert sysinfo.collect(probe_gpu=False)["kill_switches"] == {"NCCL_NVLS_ENABLE": "0"}
    finally:
        libc.unsetenv(b"NCCL_NVLS_ENABLE")
