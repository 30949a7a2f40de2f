"""The multicast gate (DESIGN section 7). Nothing here may be weakened by a suite.

NVLink multicast (NVLS, multimem, cuMulticastCreate) can take a shared NVSwitch
host out of service. A Case that needs multicast runs only when the suite opts
in, the device reports support, and no site kill switch is set.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

# Variable -> value that means "multicast disabled by the site".
KILL_SWITCHES: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}


_TRUE = {"1", "y", "yes", "t", "true", "on"}


def _switch_on(key: str, value: str | None) -> bool:
    value = (value or "").strip().lower()
    if key == "NCCL_NVLS_ENABLE":  # NCCL reads an integer: 0 disables NVLS
        return value == "0"
    return value in _TRUE  # *_DISABLE_* switches: any usual spelling of "true"


def active_kill_switches(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Kill switches set in the environment commbench was started in."""
    env = os.environ if env is None else env
    return {k: env[k] for k in KILL_SWITCHES if _switch_on(k, env.get(k))}


def kill_switch_conflict(variant_env: Mapping[str, str], env: Mapping[str, str] | None = None) -> str | None:
    """Reason a variant must be skipped: it asks to change a kill switch the site has set."""
    active = active_kill_switches(env)
    for key, value in sorted(variant_env.items()):
        if key in active and str(value).strip() != active[key].strip():
            return (f"variant sets {key}={value} but the site kill switch {key}={active[key]} is set; "
                    f"kill switches cannot be overridden by a suite")
    return None


def protect_env(variant_env: Mapping[str, str], parent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Merge a variant's env over the parent's, never letting it touch an active kill switch.

    Returns the full child environment. A variant that tries to change a set
    kill switch is not honoured for that key (the site's value stays).
    """
    parent = dict(os.environ if parent_env is None else parent_env)
    locked = active_kill_switches(parent)
    child = dict(parent)
    for key, value in variant_env.items():
        if key in locked:
            continue
        child[key] = str(value)
    return child


def multicast_block_reason(
    *, suite_allows: bool, device_supports: bool | None, env: Mapping[str, str] | None = None
) -> str | None:
    """None when a multicast Case may run; otherwise the exact reason it is skipped.

    Kill switches are checked first: they win over everything.
    """
    switches = active_kill_switches(env)
    if switches:
        names = ", ".join(f"{k}={v}" for k, v in sorted(switches.items()))
        return f"multicast disabled by site kill switch ({names})"
    if not suite_allows:
        return "multicast not enabled by the suite (set allow_multicast: true to opt in)"
    if not device_supports:
        return "device does not report CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"
    return None


def launch_env(run_dir: Path, variant_env: dict[str, str], allow_multicast: bool) -> dict[str, str]:
    """The ranks' environment: the parent's, the variant over it (kill switches locked), and
    multicast switched off unless a Case of this launch opted in (DESIGN section 7)."""
    env = protect_env({**variant_env, "PYTHONUNBUFFERED": "1",
                       "COMMBENCH_RUN_DIR": str(run_dir), "COMMBENCH_LOG_DIR": str(run_dir / "logs")})
    if not allow_multicast:
        env.update(KILL_SWITCHES)
    return env
