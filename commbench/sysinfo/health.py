"""A GPU's health counters read through NVML (the ``pynvml`` module of nvidia-ml-py), one record per
GPU: ECC (volatile and aggregate, single- and double-bit), remapped rows, retired pages, time spent
in each clock-event (throttle) reason, PCIe link generation and width (current and maximum) and its
replay counter, NVLink per link (state, CRC/replay/recovery error counters), temperature, power,
energy and clocks. The record's fields are in docs/results.md ("health.jsonl").

A counter the card or the driver does not offer is the text ``"not available: <NVML's reason>"``,
never 0: a missing counter must not read as a healthy one. Without nvidia-ml-py (or without a
driver) a node's record says ``"not available: no NVML (...)"`` and holds no GPU.

Nothing here parses nvidia-smi's text, and nothing here writes: the run folder's file is written
through commbench.runfolder.health_files.
"""
from __future__ import annotations

import ctypes
import socket
import time

NOT_AVAILABLE = "not available"
SCHEMA = 1

# (key, NVML field id name) of the clock-event counters, each the nanoseconds the clocks were held
# down for that reason since the driver loaded (NVML's "Field Value Enums", CLOCKS_EVENT_REASON_*).
THROTTLE_FIELDS = (("sw_power_cap", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
                   ("sync_boost", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
                   ("sw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
                   ("hw_thermal", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
                   ("hw_power_brake", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"))
# the bits of nvmlDeviceGetCurrentClocksEventReasons, by name
REASON_BITS = (("gpu_idle", 0x1), ("applications_clocks", 0x2), ("sw_power_cap", 0x4), ("hw_slowdown", 0x8),
               ("sync_boost", 0x10), ("sw_thermal", 0x20), ("hw_thermal", 0x40), ("hw_power_brake", 0x80),
               ("display_clocks", 0x100))
# (key, NVML memory error type, NVML counter type): single-bit = corrected, double-bit = uncorrected
ECC_COUNTERS = (("volatile_sbe", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
                ("volatile_dbe", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
                ("aggregate_sbe", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
                ("aggregate_dbe", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"))
NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"), ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                   ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
# nvmlValueType_t -> the member of nvmlValue_t that holds it
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def not_available(reason) -> str:
    return f"{NOT_AVAILABLE}: {reason}"


def is_available(value) -> bool:
    return not (isinstance(value, str) and value.startswith(NOT_AVAILABLE))


class Nvml:
    """The loaded pynvml module after nvmlInit, or why there is none (``missing``)."""

    def __init__(self, module=None, missing: str = ""):
        self.nv = module
        self.missing = missing

    def __bool__(self) -> bool:
        return self.nv is not None

    def shutdown(self) -> None:
        if self.nv is not None:
            try:
                self.nv.nvmlShutdown()
            except self.nv.NVMLError:
                pass
            self.nv = None


def open_nvml() -> Nvml:
    """pynvml initialised, or an Nvml saying why not ("no NVML (...)")."""
    try:
        import pynvml
    except ImportError as exc:
        return Nvml(missing=f"no NVML (nvidia-ml-py is not installed: {exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Nvml(missing=f"no NVML ({_reason(exc)})")
    return Nvml(pynvml)


def _reason(exc) -> str:
    return str(exc) or type(exc).__name__


def ask(nv, name: str, *args):
    """nv.<name>(*args), or "not available: <reason>" when NVML (or these bindings) cannot answer."""
    fn = getattr(nv, name, None)
    if fn is None:
        return not_available(f"these nvidia-ml-py bindings have no {name}")
    try:
        return fn(*args)
    except nv.NVMLError as exc:
        return not_available(_reason(exc))


def const(nv, name: str, default=None):
    return getattr(nv, name, default)


def handles(nvml: Nvml) -> list[tuple[int, object]]:
    """(index, handle) of every GPU NVML sees on this node (all of them: NVML ignores
    CUDA_VISIBLE_DEVICES, and a node's health is every GPU's)."""
    count = ask(nvml.nv, "nvmlDeviceGetCount")
    if not isinstance(count, int):
        return []
    out = []
    for i in range(count):
        h = ask(nvml.nv, "nvmlDeviceGetHandleByIndex", i)
        if is_available(h):
            out.append((i, h))
    return out


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def identity(nv, h) -> dict:
    pci = ask(nv, "nvmlDeviceGetPciInfo", h)
    return {"name": _text(ask(nv, "nvmlDeviceGetName", h)), "uuid": _text(ask(nv, "nvmlDeviceGetUUID", h)),
            "pci_bus_id": _text(getattr(pci, "busId", pci)), "serial": _text(ask(nv, "nvmlDeviceGetSerial", h))}


def ecc(nv, h) -> dict:
    mode = ask(nv, "nvmlDeviceGetEccMode", h)
    out = {"mode": (("enabled" if mode[0] else "disabled") if isinstance(mode, (list, tuple)) else mode)}
    for key, err, counter in ECC_COUNTERS:
        out[key] = ask(nv, "nvmlDeviceGetTotalEccErrors", h, const(nv, err), const(nv, counter))
    return out


def remapped_rows(nv, h):
    got = ask(nv, "nvmlDeviceGetRemappedRows", h)
    if not is_available(got):
        return got
    corr, unc, pending, failure = got
    return {"correctable": int(corr), "uncorrectable": int(unc), "pending": bool(pending), "failure": bool(failure)}


def retired_pages(nv, h):
    """Pages retired for single-bit (many) and double-bit errors, and whether a retirement waits for
    a reset; cards that remap rows instead (A100 and later) answer "not available"."""
    many_sbe = const(nv, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS")
    sbe = ask(nv, "nvmlDeviceGetRetiredPages", h, many_sbe)
    if not is_available(sbe):
        return sbe
    dbe = ask(nv, "nvmlDeviceGetRetiredPages", h, const(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"))
    pending = ask(nv, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    return {"single_bit": len(sbe), "double_bit": len(dbe) if is_available(dbe) else dbe,
            "pending": bool(pending) if is_available(pending) else pending}


def field_values(nv, h, names: list[str]) -> dict:
    """{field name: value or "not available: ..."} from one nvmlDeviceGetFieldValues call."""
    ids = [const(nv, n) for n in names]
    known = [(n, i) for n, i in zip(names, ids) if i is not None]
    out = {n: not_available(f"these nvidia-ml-py bindings have no {n}") for n, i in zip(names, ids) if i is None}
    if not known:
        return out
    got = ask(nv, "nvmlDeviceGetFieldValues", h, [i for _n, i in known])
    for k, (name, _id) in enumerate(known):
        if not is_available(got):
            out[name] = got
            continue
        fv = got[k]
        if fv.nvmlReturn != 0:
            out[name] = not_available(_reason(nv.NVMLError(fv.nvmlReturn)))
        else:
            out[name] = getattr(fv.value, VALUE_MEMBERS.get(int(fv.valueType), "ullVal"))
    return out


def throttle(nv, h) -> tuple[dict, object]:
    """({reason: ns held down since the driver loaded}, the reasons active now)."""
    values = field_values(nv, h, [f for _k, f in THROTTLE_FIELDS])
    counters = {key: values[field] for key, field in THROTTLE_FIELDS}
    bits = ask(nv, "nvmlDeviceGetCurrentClocksEventReasons", h)
    if not is_available(bits):
        bits = ask(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    active = [name for name, bit in REASON_BITS if int(bits) & bit] if is_available(bits) else bits
    return counters, active


def pcie(nv, h) -> dict:
    return {"gen": ask(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            "gen_max": ask(nv, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "gen_gpu_max": ask(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "width": ask(nv, "nvmlDeviceGetCurrPcieLinkWidth", h),
            "width_max": ask(nv, "nvmlDeviceGetMaxPcieLinkWidth", h),
            "replay_counter": ask(nv, "nvmlDeviceGetPcieReplayCounter", h)}


def nvlink(nv, h):
    """One entry per link NVML knows (up to NVML_NVLINK_MAX_LINKS), or "not available: ..." when the
    GPU has no NVLink (every link answers the same error)."""
    links, first_error = [], None
    for link in range(int(const(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = ask(nv, "nvmlDeviceGetNvLinkState", h, link)
        if not is_available(state):
            first_error = first_error or state
            if "Invalid Argument" in state:   # past the GPU's last link
                break
            continue
        entry = {"link": link, "state": "up" if state else "down"}
        for key, counter in NVLINK_COUNTERS:
            entry[key] = ask(nv, "nvmlDeviceGetNvLinkErrorCounter", h, link, const(nv, counter))
        links.append(entry)
    return links if links else (first_error or not_available("no NVLink reported"))


def _scaled(value, divisor: float, digits: int = 3):
    return round(value / divisor, digits) if is_available(value) else value


def sensors(nv, h) -> dict:
    return {"temperature_c": ask(nv, "nvmlDeviceGetTemperature", h, const(nv, "NVML_TEMPERATURE_GPU", 0)),
            "power_w": _scaled(ask(nv, "nvmlDeviceGetPowerUsage", h), 1000.0),
            "power_limit_w": _scaled(ask(nv, "nvmlDeviceGetEnforcedPowerLimit", h), 1000.0),
            "energy_j": _scaled(ask(nv, "nvmlDeviceGetTotalEnergyConsumption", h), 1000.0),
            "clocks_mhz": {"sm": ask(nv, "nvmlDeviceGetClockInfo", h, const(nv, "NVML_CLOCK_SM", 1)),
                           "mem": ask(nv, "nvmlDeviceGetClockInfo", h, const(nv, "NVML_CLOCK_MEM", 2)),
                           "sm_max": ask(nv, "nvmlDeviceGetMaxClockInfo", h, const(nv, "NVML_CLOCK_SM", 1)),
                           "mem_max": ask(nv, "nvmlDeviceGetMaxClockInfo", h, const(nv, "NVML_CLOCK_MEM", 2))}}


def gpu_record(nv, index: int, h) -> dict:
    """Every counter of one GPU now."""
    counters, active = throttle(nv, h)
    return {"gpu": index, **identity(nv, h), "ecc": ecc(nv, h), "remapped_rows": remapped_rows(nv, h),
            "retired_pages": retired_pages(nv, h), "throttle_ns": counters, "clock_event_reasons": active,
            "pcie": pcie(nv, h), "nvlink": nvlink(nv, h), **sensors(nv, h)}


def header(phase: str, host: str | None = None) -> dict:
    now = time.time()
    return {"schema": SCHEMA, "phase": phase, "host": host or socket.gethostname(), "t": round(now, 3),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}


def node_records(nvml: Nvml, phase: str, host: str | None = None) -> list[dict]:
    """One record per GPU of this node (``phase``: start or end), or one GPU-less record saying why
    NVML is not there."""
    head = header(phase, host)
    if not nvml:
        return [{**head, "gpu": None, "nvml": not_available(nvml.missing)}]
    driver = _text(ask(nvml.nv, "nvmlSystemGetDriverVersion"))
    found = handles(nvml)
    if not found:
        return [{**head, "gpu": None, "nvml": not_available("NVML sees no GPU on this node"), "driver": driver}]
    return [{**head, "nvml": "ok", "driver": driver, **gpu_record(nvml.nv, i, h)} for i, h in found]


def handle_key(h):
    """A hashable identity of an NVML device handle (a ctypes pointer: its address)."""
    try:
        return ctypes.cast(h, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return h
