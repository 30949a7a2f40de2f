"""Where NVSHMEM is installed and how device code builds against it (no GPU, nothing initialised).

The install is the ``nvidia-nvshmem-cu13`` (or ``-cu12``) wheel's ``nvidia/nvshmem`` folder, or
``NVSHMEM_HOME`` when set; ``metadata()`` gives the versions for run.json and rows.
"""
from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from importlib import metadata as _md
from pathlib import Path

from ..errors import CommbenchError

NVSHMEM4PY_DISTS = ("nvshmem4py-cu13", "nvshmem4py-cu12", "nvshmem4py")


class NvshmemNotFound(CommbenchError):
    """No NVSHMEM install (headers + libnvshmem_device.a + libnvshmem_host) was found."""


@dataclass(frozen=True)
class NvshmemInstall:
    home: Path

    @property
    def include(self) -> Path:
        return self.home / "include"

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    @property
    def host_lib(self) -> Path:
        for name in ("libnvshmem_host.so", "libnvshmem_host.so.3"):
            if (self.lib / name).exists():
                return self.lib / name
        raise NvshmemNotFound(f"libnvshmem_host.so not found in {self.lib}")

    @property
    def version(self) -> str:
        """Library version from the installed header (no GPU or init needed)."""
        text = (self.include / "non_abi" / "nvshmem_version.h").read_text()
        parts = [re.search(rf"NVSHMEM_VENDOR_{p}_VERSION\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
        return ".".join(m.group(1) for m in parts if m) or "unknown"


def _candidates() -> list[Path]:
    out = []
    if os.environ.get("NVSHMEM_HOME"):
        out.append(Path(os.environ["NVSHMEM_HOME"]))
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        out.append(Path(base) / "nvshmem")
    return out


def find_install() -> NvshmemInstall:
    """The first NVSHMEM install with headers and the static device library."""
    for home in _candidates():
        inst = NvshmemInstall(home)
        if (inst.include / "nvshmem.h").exists() and (inst.lib / "libnvshmem_device.a").exists():
            return inst
    raise NvshmemNotFound(
        "NVSHMEM not found: pip install nvidia-nvshmem-cu13 (or -cu12), or set NVSHMEM_HOME "
        "to a folder with include/nvshmem.h and lib/libnvshmem_device.a")


def compile_flags(inst: NvshmemInstall) -> list[str]:
    """nvcc flags for device code that calls NVSHMEM (relocatable device code)."""
    return ["-rdc=true", f"-I{inst.include}"]


def link_args(inst: NvshmemInstall) -> list[str]:
    """Linker arguments: static device library, host library with an rpath, symbolic binding.

    -Bsymbolic keeps each library's calls on its own copy of the device-library
    host code, so a library registers its own device state, not another's.
    """
    host = inst.host_lib
    return [str(inst.lib / "libnvshmem_device.a"), f"-L{inst.lib}", f"-l:{host.name}",
            f"-Xlinker=-rpath,{inst.lib}", "-Xlinker=-Bsymbolic"]


def metadata() -> dict:
    """Versions for run.json and rows, without a GPU and without initialising anything."""
    out = {"nvshmem": None, "nvshmem_home": None, "nvshmem4py": None}
    try:
        inst = find_install()
        out.update(nvshmem=inst.version, nvshmem_home=str(inst.home))
    except (NvshmemNotFound, OSError):
        pass
    for dist in NVSHMEM4PY_DISTS:
        try:
            out["nvshmem4py"] = _md.version(dist)
            break
        except _md.PackageNotFoundError:
            continue
    return out
