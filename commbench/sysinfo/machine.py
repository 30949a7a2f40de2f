"""What machine a run happened on: GPUs, driver, library versions, topology, multicast.

Every probe is guarded: a missing package, GPU or tool gives ``None``, never an
exception. Heavy imports (torch, cupy, mpi4py.MPI) are avoided unless the
process already loaded them, so ``collect()`` stays fast on a CPU machine.
Nothing here creates a CUDA context or touches multicast objects: the only
driver calls are cuInit and read-only device queries.
"""
from __future__ import annotations

import ast
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import __version__
from ..safety import held_switches
from . import links as link_probe
from .secrets import CREDENTIAL_NAME, WITHHELD, is_secret, looks_secret, redact_env

__all__ = ["CREDENTIAL_NAME", "WITHHELD", "collect", "filtered_env", "is_secret", "looks_secret", "redact_env",
           "withheld_env"]

ENV_PREFIXES = ("NCCL_", "NVSHMEM_", "CUDA_", "UCX_", "OMPI_MCA_", "TORCH_", "COMMBENCH_")
TOOL_TIMEOUT_S = 5.0
_ATTR_CC_MAJOR, _ATTR_CC_MINOR, _ATTR_MULTICAST = 75, 76, 132  # CUdevice_attribute values in cuda.h
_GPU_FIELDS = "index,name,uuid,memory.total,compute_cap,pci.bus_id,driver_version"


def filtered_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment restricted to the allow-listed prefixes (docs/results.md, "run.json"), minus any
    variable that looks like a credential by name or value (``withheld_env``)."""
    env = os.environ if env is None else env
    return {k: str(v) for k, v in sorted(env.items())
            if k.startswith(ENV_PREFIXES) and not is_secret(k, v)}


def withheld_env(env: Mapping[str, str] | None = None) -> list[str]:
    """Names (never values) of allow-listed variables left out because they look like credentials."""
    env = os.environ if env is None else env
    return sorted(k for k, v in env.items() if k.startswith(ENV_PREFIXES) and is_secret(k, v))


def _safe(fn: Callable[..., Any], *args: Any) -> Any:
    """Run one probe; any failure means 'unknown'. A probe must never stop `info` or a run."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a probe's failure is data (None), not an error
        return None


def _tool(argv: list[str], timeout_s: float = TOOL_TIMEOUT_S) -> str | None:
    """stdout of a tool, or None if it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def _dist_version(*names: str) -> str | None:
    """Version of the first installed distribution among names (no import)."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None


def parse_gpu_csv(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=<_GPU_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 7:
            continue
        index, name, gpu_uuid, mem, cc, pci, driver = cols
        gpus.append({
            "index": int(index), "name": name, "uuid": gpu_uuid,
            "memory_total_mib": int(float(mem)) if mem.replace(".", "").isdigit() else None,
            "compute_capability": cc if re.fullmatch(r"\d+\.\d+", cc) else None,
            "pci_bus_id": pci, "driver": driver,
        })
    return gpus


def parse_nvlink_status(text: str) -> list[dict[str, Any]] | None:
    """Per-GPU link count and active links from `nvidia-smi nvlink --status`."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = re.match(r"GPU (\d+):", line.strip())
        if head:
            gpus.append({"index": int(head.group(1)), "links": 0, "active": 0, "link_gbps": []})
        elif gpus and re.match(r"Link \d+:", line.strip()):
            gpus[-1]["links"] += 1
            speed = re.search(r"([\d.]+)\s*GB/s", line)
            if speed and "inactive" not in line.lower():
                gpus[-1]["active"] += 1
                gpus[-1]["link_gbps"].append(float(speed.group(1)))
    return gpus if any(g["links"] for g in gpus) else None


def parse_nvshmem_header(text: str) -> str | None:
    """'major.minor.patch' from nvshmem_version.h."""
    parts = [re.search(rf"#define\s+NVSHMEM_VENDOR_{p}_VERSION\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def _os_name() -> str:
    try:
        pretty = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        pretty = None
    kernel = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{pretty} ({kernel})" if pretty else kernel


def _git() -> dict[str, Any] | None:
    root = Path(__file__).resolve().parents[2]   # the checkout holding commbench/
    if not (root / ".git").exists():
        return None
    rev = _tool(["git", "-C", str(root), "rev-parse", "HEAD"])
    if rev is None:
        return None
    status = _tool(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    return {"revision": rev.strip(), "dirty": bool(status)}


def _torch() -> dict[str, Any]:
    """torch version and its CUDA, read from torch/version.py: importing torch costs seconds."""
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        return {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {"torch": None, "torch_cuda": None}
    values: dict[str, Any] = {}
    tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text())
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            values[target.id] = node.value.value
    return {"torch": values.get("__version__"), "torch_cuda": values.get("cuda")}


def _nccl() -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        version = _safe(torch.cuda.nccl.version)
        if isinstance(version, tuple):
            return ".".join(str(v) for v in version)
    return _dist_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")


def _nvshmem() -> dict[str, Any] | None:
    lib = _dist_version("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12", "nvidia-nvshmem")
    source = "package" if lib else None
    if lib is None:
        roots = [Path(os.environ["NVSHMEM_HOME"])] if os.environ.get("NVSHMEM_HOME") else []
        spec = find_spec("nvidia.nvshmem") if find_spec("nvidia") else None
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
        headers = [r / "include" / sub / "nvshmem_version.h" for r in roots for sub in ("non_abi", "")]
        found = next(((str(h), v) for h in headers if h.is_file() and (v := parse_nvshmem_header(h.read_text()))), None)
        source, lib = found or (None, None)
    py = _dist_version("nvshmem4py-cu13", "nvshmem4py-cu12", "nvshmem4py")
    return {"library": lib, "source": source, "nvshmem4py": py} if lib or py else None


def _mpi() -> dict[str, Any] | None:
    if find_spec("mpi4py") is None:
        return None
    import mpi4py

    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None:
        library = mod.Get_library_version()
    else:
        # A child process: importing mpi4py.MPI here would initialise MPI in this process.
        code = "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())"
        library = _tool([sys.executable, "-c", code])
    # Open MPI pads the string with NULs; the first line names implementation and version.
    text = (library or "").replace("\0", "").strip()
    first = text.splitlines()[0].strip().rstrip(",") if text else None
    return {"mpi4py": mpi4py.__version__, "library": first, "mpiexec": _safe(_mpiexec)}


def _mpiexec() -> str:
    """The mpiexec `commbench run` would use (the one that belongs to the installed mpi4py)."""
    from .mpi import find_mpiexec

    return find_mpiexec()


def _cuda_driver() -> Any:
    """cuda-bindings' driver module with cuInit done, or None."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        from cuda import cuda as cu  # cuda-python before the cuda.bindings layout
    (err,) = cu.cuInit(0)
    return cu if _ok(err) else None


def _ok(err: Any) -> bool:
    """CUDA_SUCCESS, whether the bindings return an Enum or an int."""
    return getattr(err, "value", err) == 0


def _device_query(cu: Any) -> dict[str, Any]:
    """Read-only per-device facts through the driver API (no context is created)."""
    _, count = cu.cuDeviceGetCount()
    _, driver_api = cu.cuDriverGetVersion()
    get_uuid = getattr(cu, "cuDeviceGetUuid", None) or cu.cuDeviceGetUuid_v2
    multicast, gpus = [], []
    for i in range(count):
        _, dev = cu.cuDeviceGet(i)

        def attr(a: int) -> int | None:
            err, val = cu.cuDeviceGetAttribute(cu.CUdevice_attribute(a), dev)
            return int(val) if _ok(err) else None

        mc = attr(_ATTR_MULTICAST)
        multicast.append(None if mc is None else bool(mc))
        gpus.append({
            "index": i,
            "name": _safe(lambda: cu.cuDeviceGetName(256, dev)[1].split(b"\0")[0].decode()),
            "uuid": _safe(lambda: f"GPU-{uuid.UUID(bytes=bytes(get_uuid(dev)[1].bytes)[:16])}"),
            "memory_total_mib": _safe(lambda: int(cu.cuDeviceTotalMem(dev)[1]) // 2**20),
            "compute_capability": _safe(lambda: f"{attr(_ATTR_CC_MAJOR):d}.{attr(_ATTR_CC_MINOR):d}"),
            "pci_bus_id": _safe(lambda: cu.cuDeviceGetPCIBusId(32, dev)[1].split(b"\0")[0].decode()),
        })
    return {"multicast": multicast, "gpus": gpus, "cuda_driver": f"{driver_api // 1000}.{driver_api % 1000 // 10}"}


def multicast_supported() -> list[bool | None] | None:
    """CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED per CUDA device ordinal; None when unknown.

    Only queries the attribute: never creates a multicast object.
    """
    cu = _safe(_cuda_driver)
    query = _safe(_device_query, cu) if cu is not None else None
    return query["multicast"] if query and query["multicast"] else None


def _cuda_runtime() -> str | None:
    try:
        from cuda.bindings import runtime as rt

        err, version = rt.cudaRuntimeGetVersion()
        if _ok(err):
            return f"{version // 1000}.{version % 1000 // 10}"
    except ImportError:
        pass
    return _dist_version("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12")


def _proc_driver() -> str | None:
    text = Path("/proc/driver/nvidia/version").read_text()
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
    return found.group(1) if found else None


def _gpu_facts(probe_gpu: bool, pool: ThreadPoolExecutor) -> dict[str, Any]:
    """GPU list, driver, links, topology and multicast; all None without a GPU or with probe_gpu=False."""
    facts: dict[str, Any] = dict.fromkeys(("gpus", "driver", "cuda_driver", "cuda_runtime", "topology", "nvlink",
                                           "multicast_supported"))
    if not probe_gpu:
        return facts
    smi = ["nvidia-smi"] if shutil.which("nvidia-smi") else None
    # nvidia-smi can take a second per call on a large node; run the three side by side.
    futures = [pool.submit(_tool, smi + args) if smi else None for args in (
        [f"--query-gpu={_GPU_FIELDS}", "--format=csv,noheader,nounits"], ["topo", "-m"], ["nvlink", "--status"])]
    query = _safe(_device_query, _safe(_cuda_driver))
    gpu_text, topo_text, link_text = (f.result() if f else None for f in futures)
    gpus = (_safe(parse_gpu_csv, gpu_text) if gpu_text else None) or (query["gpus"] if query else None)
    # nvidia-smi repeats the driver version on every row; keep it once.
    smi_driver = [g.pop("driver", None) for g in gpus or []]
    facts.update(
        gpus=gpus or None, driver=(smi_driver[0] if smi_driver else None) or _safe(_proc_driver),
        cuda_driver=query["cuda_driver"] if query else None, cuda_runtime=_safe(_cuda_runtime),
        topology=topo_text.rstrip() if topo_text else None,
        nvlink=_safe(parse_nvlink_status, link_text) if link_text else None,
        multicast_supported=(query["multicast"] or None) if query else None,
    )
    return facts


def collect(*, probe_gpu: bool = True) -> dict[str, Any]:
    """Facts about this host, JSON-serialisable; ``probe_gpu=False`` skips nvidia-smi and the driver.

    The driver probe runs cuInit, which fixes CUDA_VISIBLE_DEVICES for this
    process: call it after a rank has bound its GPU, or from rank 0 only.
    ``multicast_supported`` is indexed by CUDA ordinal, ``gpus`` by nvidia-smi index.
    """
    with ThreadPoolExecutor(max_workers=5) as pool:
        git_f, mpi_f = pool.submit(_safe, _git), pool.submit(_safe, _mpi)
        gpu = _gpu_facts(probe_gpu, pool)
        git = git_f.result() or {}
        return {
            "hostname": socket.gethostname(), "os": _safe(_os_name),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "cpu_count": os.cpu_count(), "commbench_version": __version__,
            "git_revision": git.get("revision"), "git_dirty": git.get("dirty"),
            **gpu, "links": _safe(lambda: link_probe.collect(gpu, probe_gpu=probe_gpu)),
            **(_safe(_torch) or {"torch": None, "torch_cuda": None}),
            "nccl": _safe(_nccl), "nvshmem": _safe(_nvshmem), "mpi": mpi_f.result(),
            "cupy": _dist_version("cupy-cuda13x", "cupy-cuda12x", "cupy"),
            "cuda_core": _dist_version("cuda-core"),
            "cuda_bindings": _dist_version("cuda-bindings", "cuda-python"),
            "kill_switches": held_switches(),   # the C environment NCCL and NVSHMEM read
        }
