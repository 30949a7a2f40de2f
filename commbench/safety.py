"""The multicast gate (docs/design.md, "Multicast safety"). Nothing here may be weakened by a suite.

NVLink multicast (NVLS, multimem, cuMulticastCreate) can take a shared NVSwitch
host out of service. A Case that needs multicast runs only when the suite opts
in, the device reports support, and no site kill switch is set.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Mapping

from .errors import CommbenchError

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


# --- what a suite's `env:` may set -------------------------------------------------------------
# Only variables that configure the communication stack. Anything that chooses which code runs in
# a rank (PATH, PYTHON*, LD_*, library and plugin paths, launch agents) could switch a kill switch
# back off from inside the rank, so a suite may never set it.
SUITE_ENV_PREFIXES = ("NCCL_", "NVSHMEM_", "UCX_", "CUDA_", "OMPI_MCA_", "PMIX_MCA_", "TORCH_NCCL_",
                      "TORCH_SYMM_MEM_", "GLOO_", "COMMBENCH_")
# Names under those prefixes that load code or pick files: plugins, libraries, toolkits, injection,
# config files, launch agents, and commbench's own internal paths.
# ENV: Open MPI's mca_base_env_list sets any variable (LD_PRELOAD too) in every rank; ARGS, CMD,
# EXEC, SCRIPT: options and commands handed to ssh or a launch agent.
_CODE_LOADING = re.compile(r"PLUGIN|PRELOAD|INJECTION|LIB|PATH|HOME|ROOT|_DIR|CONF_FILE|AGENT|PREFIX|"
                           r"PARAM_FILE|KERNELS|JIT_CACHE|ENV|ARGS|CMD|COMMAND|EXEC|SCRIPT|"
                           r"^COMMBENCH_RUN|^COMMBENCH_LOG|^COMMBENCH_KILL")


def suite_env_refusal(name: str) -> str | None:
    """Why a suite may not set ``name`` (None when it may). The message says what to do instead."""
    upper = name.upper()
    if not name.startswith(SUITE_ENV_PREFIXES):   # names are case-sensitive: nccl_algo is not NCCL_ALGO
        return (f"{name} is not a communication-stack variable; a suite may set only variables starting "
                f"with {', '.join(SUITE_ENV_PREFIXES)} (case matters; set others in the environment "
                f"commbench starts in)")
    if _CODE_LOADING.search(upper):
        return (f"{name} chooses code or files that every rank loads (a plugin, library, path or agent); "
                f"a suite may not set it: set it in the environment commbench starts in")
    return None


# --- the ranks re-read the switches (the launch says what it set) --------------------------------
EXPECTED_VAR = "COMMBENCH_KILL_SWITCHES"


def expected_switches(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The kill switches the launching process set for this rank, or None when nothing was said."""
    raw = (os.environ if env is None else env).get(EXPECTED_VAR)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"<unreadable>": raw[:40]}
    return value if isinstance(value, dict) else {"<unreadable>": str(value)[:40]}


def switch_tamper(seen: Mapping[str, str], expected: Mapping[str, str] | None) -> str | None:
    """Why a rank must not measure: the switches it sees differ from what its launch set."""
    if expected is None:
        return None
    if dict(seen) != dict(expected):
        missing = sorted(set(expected) - set(seen))
        return (f"multicast kill switches changed inside the rank: launch set "
                f"{json.dumps(expected, sort_keys=True)}, rank sees {json.dumps(dict(seen), sort_keys=True)}"
                + (f" ({', '.join(missing)} no longer set)" if missing else "")
                + "; refusing to measure")
    return None


def launch_env(run_dir: Path, variant_env: dict[str, str], allow_multicast: bool) -> dict[str, str]:
    """The ranks' environment: the parent's, the variant over it (kill switches locked), and
    multicast switched off unless a Case of this launch opted in."""
    env = protect_env({**variant_env, "PYTHONUNBUFFERED": "1",
                       "COMMBENCH_RUN_DIR": str(run_dir), "COMMBENCH_LOG_DIR": str(run_dir / "logs")})
    if not allow_multicast:
        env.update(KILL_SWITCHES)
    env[EXPECTED_VAR] = json.dumps(active_kill_switches(env), sort_keys=True)
    return env


# --- the C environment: what NCCL and NVSHMEM actually read -------------------------------------
# os.environ is Python's copy, taken at start-up; a library (or a sitecustomize through ctypes) that
# calls libc setenv changes only the C environment, which is what NCCL's and NVSHMEM's getenv see.
def _libc_getenv():
    try:
        import ctypes

        getenv = ctypes.CDLL(None).getenv
    except (OSError, AttributeError, ImportError):   # no C library to ask (not POSIX)
        return None
    getenv.restype = ctypes.c_char_p
    getenv.argtypes = [ctypes.c_char_p]
    return getenv


_GETENV = _libc_getenv()


def c_switch_values() -> dict[str, str]:
    """The kill-switch variables as libc ``getenv`` returns them (os.environ where there is no libc)."""
    if _GETENV is None:
        return {k: os.environ[k] for k in KILL_SWITCHES if k in os.environ}
    out = {}
    for key in KILL_SWITCHES:
        raw = _GETENV(key.encode())
        if raw is not None:
            out[key] = raw.decode("utf-8", "replace")
    return out


def held_switches() -> dict[str, str]:
    """The kill switches NCCL and NVSHMEM will honour: those set in the C environment."""
    return active_kill_switches(c_switch_values())


def c_environment_split(py_env: Mapping[str, str] | None = None) -> str | None:
    """Why the C environment cannot be trusted: it disagrees with os.environ on a kill switch."""
    py_env = os.environ if py_env is None else py_env
    c_env = c_switch_values()
    differ = [k for k in KILL_SWITCHES if c_env.get(k) != py_env.get(k)]
    if not differ:
        return None
    shown = "; ".join(f"{k}: os.environ {py_env.get(k)!r}, C environment {c_env.get(k)!r}" for k in differ)
    return (f"the C environment (what NCCL and NVSHMEM read) differs from Python's os.environ on multicast "
            f"kill switches ({shown}): something in this process called setenv; refusing to measure")


def c_switch_problem(expected: Mapping[str, str] | None) -> str | None:
    """Why a rank must not measure, judged by the C environment: it differs from os.environ, or it
    does not hold the switches the launch set."""
    split = c_environment_split()
    if split:
        return split
    return switch_tamper(held_switches(), expected)


class SwitchesNotHeld(CommbenchError):
    """A communicator was about to be created while the C environment does not hold the switches."""


def before_communicator(what: str) -> None:
    """Called just before ``what`` (a communicator) is created: the C environment must agree with
    os.environ and hold what the launch set (nothing to hold it to when the launch said nothing).
    Raises SwitchesNotHeld (the Case fails) otherwise."""
    problem = c_switch_problem(expected_switches())
    if problem:
        raise SwitchesNotHeld(f"{what} not created: {problem}")
