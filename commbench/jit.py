"""Compile kernels/*.cu into shared libraries, cached by a hash of everything that matters.

The cache key covers the source, every header in kernels/, the flags, the GPU
architecture and the nvcc version. Compilation goes to a temporary file that is
renamed into place, so several ranks compiling at once never see a half-written
library. Libraries are loaded with ctypes; kernels expose ``extern "C"`` launchers
that take a ``cudaStream_t`` (pass ``torch.cuda.current_stream().cuda_stream``).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from .errors import CommbenchError


class JitError(CommbenchError):
    """nvcc is missing or a kernel failed to compile (message has the compiler output)."""


def kernels_dir() -> Path:
    """Folder holding the CUDA sources (package data when installed, ./kernels in a checkout)."""
    env = os.environ.get("COMMBENCH_KERNELS_DIR")
    if env:
        return Path(env)
    # A checkout's own kernels/ first: an editable install elsewhere maps commbench.kernels
    # to its own tree, which would compile another checkout's sources.
    beside = Path(__file__).resolve().parent.parent / "kernels"
    if (beside / "__init__.py").exists():
        return beside
    try:
        import commbench.kernels as k  # mapped to the top-level kernels/ folder

        return Path(list(k.__path__)[0])
    except ImportError:
        return Path(__file__).resolve().parent.parent / "kernels"


def cache_dir() -> Path:
    d = Path(os.environ.get("COMMBENCH_JIT_CACHE", Path.home() / ".cache" / "commbench" / "jit"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@lru_cache(maxsize=None)
def find_nvcc() -> str:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).exists():
            return cand
    raise JitError("nvcc not found: install the CUDA toolkit or set NVCC=/path/to/nvcc")


@lru_cache(maxsize=None)
def nvcc_version() -> str:
    out = subprocess.run([find_nvcc(), "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[-1] if out.stdout else "unknown"


def default_arch() -> str:
    """sm_XY of the current GPU, or COMMBENCH_CUDA_ARCH, or sm_90."""
    env = os.environ.get("COMMBENCH_CUDA_ARCH")
    if env:
        return env
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    return "sm_90"


def _digest(source: Path, flags: list[str], arch: str) -> str:
    h = hashlib.sha256()
    h.update(source.read_bytes())
    for hdr in sorted(kernels_dir().rglob("*.cuh")) + sorted(kernels_dir().rglob("*.h")):
        h.update(hdr.name.encode())
        h.update(hdr.read_bytes())
    h.update(" ".join(flags).encode())
    h.update(arch.encode())
    h.update(nvcc_version().encode())
    return h.hexdigest()[:16]


def build(name: str, *, flags: list[str] | None = None, arch: str | None = None,
          libs: list[str] | None = None) -> Path:
    """Compile kernels/<name>.cu to a shared library (cached) and return its path.

    ``flags`` go to nvcc (e.g. ``-rdc=true``, ``-I...``); ``libs`` are linker
    arguments (``-L...``, ``-lnvshmem_host``...).
    """
    source = kernels_dir() / f"{name}.cu"
    if not source.exists():
        raise JitError(f"kernel source not found: {source}")
    arch = arch or default_arch()
    flags = list(flags or [])
    libs = list(libs or [])
    key = _digest(source, flags + libs, arch)
    target = cache_dir() / f"{name}-{arch}-{key}.so"
    if target.exists():
        return target
    return compile_into(target, lambda out: [find_nvcc(), "-O3", "-std=c++17", f"-arch={arch}", "-shared",
                                             "-Xcompiler", "-fPIC", f"-I{kernels_dir()}", *flags, str(source),
                                             "-o", out, *libs], f"nvcc failed for {source.name}")


def compile_into(target: Path, argv_for, failure: str) -> Path:
    """Run the compiler ``argv_for(temporary path)`` writes with, then rename its output to
    ``target``: processes building the same library at once never load half a file. A failed
    build leaves nothing and raises JitError (``failure``, the command, the compiler's words)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    cmd = argv_for(tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise JitError(f"{failure} ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, target)
    return target


def load(name: str, **kwargs) -> ctypes.CDLL:
    """Build (if needed) and load kernels/<name>.cu; the same handle is returned per process."""
    return _load_cached(name, tuple(kwargs.get("flags") or ()), kwargs.get("arch"),
                        tuple(kwargs.get("libs") or ()))


@lru_cache(maxsize=None)
def _load_cached(name, flags, arch, libs) -> ctypes.CDLL:
    path = build(name, flags=list(flags), arch=arch, libs=list(libs))
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def compile_check(name: str, *, arch: str = "sm_90", flags: list[str] | None = None) -> None:
    """Compile kernels/<name>.cu to an object file without a GPU (CI check). Raises JitError."""
    source = kernels_dir() / f"{name}.cu"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [find_nvcc(), "-std=c++17", f"-arch={arch}", "-Xcompiler", "-fPIC", "-c",
               f"-I{kernels_dir()}", *(flags or []), str(source), "-o", str(Path(tmp) / "k.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise JitError(f"nvcc failed for {source.name}:\n{proc.stderr[-4000:]}")
