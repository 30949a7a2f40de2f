"""Which all-reduce Cases need NVLink multicast, and whether this device could do it.

The decision itself lives in :mod:`commbench.safety` (docs/design.md, "Multicast safety"); this
module only classifies Cases and reads the device attribute. It never creates
a multicast object.
"""
from __future__ import annotations

from typing import Mapping

from ... import safety
from ...sysinfo import nccl_log
from ..base import Case

# CUdevice_attribute value in cuda.h (CUDA >= 12.1).
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
MULTICAST_BACKENDS = frozenset({"torch_multimem"})
MULTICAST_ALGOS = frozenset({"NVLS", "NVLSTree"})
NCCL_BACKENDS = frozenset({"nccl", "nccl_symm"})


def multicast_requested(backend: str, env: Mapping[str, str]) -> bool:
    """True when the Case asks for multicast: multimem, a forced NVLS algorithm, or a switch re-enabled."""
    if backend in MULTICAST_BACKENDS:
        return True
    if backend in NCCL_BACKENDS:
        spec = nccl_log.algo_spec_for(env.get("NCCL_ALGO"), "AllReduce")
        # Only a list that names NVLS/NVLSTree asks for them; "^Ring" merely leaves
        # NCCL's default choice, which the launch's NCCL_NVLS_ENABLE=0 keeps multicast-free.
        if spec and not spec.startswith("^"):
            if nccl_log.requested_algos(spec, "AllReduce") & MULTICAST_ALGOS:
                return True
    # A variant trying to turn a switch back on is asking for multicast too.
    return any(key in env and str(env[key]).strip() != off for key, off in safety.KILL_SWITCHES.items())


def case_requests_multicast(case: Case) -> bool:
    return multicast_requested(case.backend, case.env_dict)


def planning_block_reason(case: Case, env: Mapping[str, str] | None = None) -> str | None:
    """Reason known before launch (kill switch, no opt-in); device support is checked in setup."""
    if not case_requests_multicast(case):
        return None
    return safety.multicast_block_reason(
        suite_allows=bool(case.param("allow_multicast", False)), device_supports=True, env=env)


def runtime_block_reason(case: Case, device_ordinal: int, env: Mapping[str, str] | None = None) -> str | None:
    """Full gate in the rank: opt-in, device attribute, kill switches (exact safety text)."""
    if not case_requests_multicast(case):
        return None
    switches = safety.active_kill_switches(env)
    allows = bool(case.param("allow_multicast", False))
    # Ask the device only when nothing else already forbids it.
    supports = device_supports_multicast(device_ordinal) if allows and not switches else False
    return safety.multicast_block_reason(suite_allows=allows, device_supports=supports, env=env)


# NCCL enables NVLS by default on NVSwitch systems and torch symmetric memory creates multicast
# objects when it can; both read these once, before first use, so they belong to the launch.
MULTICAST_OFF = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")


def multicast_off_refusal(env: Mapping[str, str] | None = None) -> str | None:
    """Why a Case that must not use multicast cannot run in this rank: a switch that keeps NCCL
    and torch symmetric memory off multicast is not held. The launch sets them for every rank
    unless a Case of the launch opted in (``allow_multicast``); a family never sets them."""
    held = safety.active_kill_switches(env)
    missing = [f"{k}={safety.KILL_SWITCHES[k]}" for k in MULTICAST_OFF if k not in held]
    if not missing:
        return None
    return (f"this Case must run with multicast off, but the rank's environment lacks {', '.join(missing)} "
            f"(a launch with allow_multicast: true leaves them unset; give this Case a launch of its own "
            f"without allow_multicast)")


def device_supports_multicast(ordinal: int) -> bool | None:
    """CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED for a device; None when it cannot be read."""
    try:
        from cuda.bindings import driver  # cuda-bindings >= 12.6
    except ImportError:
        driver = None
    if driver is not None:
        (err,) = driver.cuInit(0)
        if err == driver.CUresult.CUDA_SUCCESS:
            err, dev = driver.cuDeviceGet(ordinal)
            if err == driver.CUresult.CUDA_SUCCESS:
                err, value = driver.cuDeviceGetAttribute(
                    driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev)
                if err == driver.CUresult.CUDA_SUCCESS:
                    return bool(value)
    return _attribute_via_libcuda(ordinal)


def _attribute_via_libcuda(ordinal: int) -> bool | None:
    import ctypes   # here: validate imports this module and never needs it

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, value = ctypes.c_int(), ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None
    if lib.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev) != 0:
        return None
    return bool(value.value)
