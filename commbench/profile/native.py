"""Build small host C++ libraries from kernels/<folder>/ (the NCCL profiler plugin, the NVTX shim).

Cached like commbench.jit's CUDA kernels: the key covers every source and header
of the folder, the flags and the compiler version; the library is compiled to a
temporary name and renamed into place, so ranks building at once never load half
a file. The host C++ compiler builds them ($CXX, g++, c++), nvcc as the fallback.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from ..jit import JitError, cache_dir, compile_into, kernels_dir


@lru_cache(maxsize=None)
def find_compiler() -> str:
    for cand in (os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++")):
        if cand and Path(cand).exists():
            return cand
    try:
        from ..jit import find_nvcc

        return find_nvcc()
    except JitError:
        raise JitError("no C++ compiler found: install g++ or set CXX") from None


@lru_cache(maxsize=None)
def _compiler_version(compiler: str) -> str:
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def argv(compiler: str, sources: list[Path], out: str, *, lib_name: str, includes=(), libs=()) -> list[str]:
    incs = [f"-I{d}" for d in includes]
    if Path(compiler).name.startswith("nvcc"):   # host-only flags go through -Xcompiler / -Xlinker
        # a host library: no CUDA runtime linked in, and nothing of a static archive exported
        return [compiler, "-O2", "-std=c++17", "-shared", "-cudart", "none", "-Xcompiler",
                "-fPIC,-fvisibility=hidden", "-Xlinker", f"-soname,{lib_name},--exclude-libs,ALL", *incs,
                *map(str, sources), "-o", out, *libs]
    return [compiler, "-O2", "-std=c++17", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
            f"-Wl,-soname,{lib_name},--exclude-libs,ALL", *incs, *map(str, sources), "-o", out, *libs]


def build_library(folder: str, lib_name: str, *, includes=(), libs=()) -> Path:
    """Compile kernels/<folder>/*.cc into <cache>/<folder>-<key>/<lib_name> if needed; return its path."""
    src_dir = kernels_dir() / folder
    sources = sorted(src_dir.glob("*.cc"))
    if not sources:
        raise JitError(f"no C++ sources in {src_dir}")
    compiler = find_compiler()
    h = hashlib.sha256()
    for path in sorted(src_dir.iterdir()):
        if path.suffix in (".cc", ".h"):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    h.update(" ".join(argv(compiler, sources, "OUT", lib_name=lib_name, includes=includes, libs=libs)).encode())
    h.update(_compiler_version(compiler).encode())
    target = cache_dir() / f"{folder}-{h.hexdigest()[:16]}" / lib_name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    return compile_into(target, lambda out: argv(compiler, sources, out, lib_name=lib_name, includes=includes,
                                                 libs=libs), f"building {lib_name} failed")
