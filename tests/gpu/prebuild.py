"""Build every kernel library in parallel before a GPU run (each suite would otherwise pay for its own).

    python3 tests/gpu/prebuild.py    # prints one line per library; exit 1 if any failed
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from commbench import jit
from commbench.comm import nvshmem as paths


def uses_nvshmem(source) -> bool:
    """A kernel library built against NVSHMEM includes one of its headers."""
    return any(line.startswith("#include") and "nvshmem" in line
               for line in source.read_text().splitlines())


def main() -> int:
    sources = sorted(jit.kernels_dir().glob("*.cu"))
    jobs = {src.stem: {} for src in sources if not uses_nvshmem(src)}
    try:
        inst = paths.find_install()
        ns = {"flags": paths.compile_flags(inst), "libs": paths.link_args(inst)}
        jobs.update({src.stem: ns for src in sources if uses_nvshmem(src)})
    except paths.NvshmemNotFound as exc:
        print(f"NVSHMEM not found, its libraries are not built: {exc}")
    failed = 0
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(jit.build, name, **kw) for name, kw in jobs.items()}
        for name, fut in futures.items():
            try:
                fut.result()
                print("built", name)
            except Exception as exc:  # noqa: BLE001 - report every library, then fail
                failed += 1
                print("BUILD FAILED", name, str(exc)[-1500:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
