"""Build kernels/nccl_profiler/ into libnccl-profiler-commbench.so, cached like the CUDA kernels.

The plugin is plain C++ (it declares NCCL's profiler ABI itself and needs no CUDA
or NCCL headers), so the host C++ compiler builds it; nvcc is the fallback, as it
drives the same compiler. The cache key covers every source and header of the
plugin, the flags and the compiler version; the library is compiled to a temporary
name and renamed into place, so ranks building at once never load half a file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from ..jit import JitError, cache_dir, kernels_dir

LIB_NAME = "libnccl-profiler-commbench.so"
FLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
         f"-Wl,-soname,{LIB_NAME}"]


def source_dir() -> Path:
    return kernels_dir() / "nccl_profiler"


def sources() -> list[Path]:
    return sorted(source_dir().glob("*.cc"))


@lru_cache(maxsize=None)
def find_compiler() -> list[str]:
    """argv prefix of a C++ compiler: $CXX, g++, c++, else nvcc (which calls the host compiler)."""
    for cand in (os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++")):
        if cand and Path(cand).exists():
            return [cand]
    try:
        from ..jit import find_nvcc

        return [find_nvcc()]
    except JitError:
        raise JitError("no C++ compiler for the NCCL profiler plugin: install g++ or set CXX") from None


def _compiler_version(cmd: list[str]) -> str:
    out = subprocess.run([cmd[0], "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "unknown"


def _argv(cmd: list[str], out: str) -> list[str]:
    srcs = [str(s) for s in sources()]
    if Path(cmd[0]).name.startswith("nvcc"):
        # nvcc passes host-only flags through -Xcompiler / -Xlinker
        return [*cmd, "-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden",
                "-Xlinker", f"-soname,{LIB_NAME}", *srcs, "-o", out, "-lpthread"]
    return [*cmd, *FLAGS, *srcs, "-o", out, "-lpthread"]


def _key(cmd: list[str]) -> str:
    h = hashlib.sha256()
    for path in sorted(source_dir().glob("*")):
        if path.suffix in (".cc", ".h"):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    h.update(" ".join(_argv(cmd, "OUT")).encode())
    h.update(_compiler_version(cmd).encode())
    return h.hexdigest()[:16]


def build() -> Path:
    """Compile the plugin if needed; return the library's path (NCCL_PROFILER_PLUGIN takes it)."""
    if not sources():
        raise JitError(f"NCCL profiler plugin sources not found in {source_dir()}")
    cmd = find_compiler()
    folder = cache_dir() / f"nccl_profiler-{_key(cmd)}"
    target = folder / LIB_NAME
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".plugin-", suffix=".so", dir=folder)
    os.close(fd)
    argv = _argv(cmd, tmp)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise JitError(f"building the NCCL profiler plugin failed ({' '.join(argv)}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, target)
    return target
