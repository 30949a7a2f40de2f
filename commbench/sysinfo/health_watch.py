"""What happens to a node's GPUs while a launch measures: XID and ECC events through one NVML event
set (every GPU registered for the event types it supports), and a light sample every
``period_s`` of what changes under load (the PCIe link's generation and width, which a GPU lowers
when idle; temperature; power).

It all runs in one daemon thread that waits inside NVML (``nvmlEventSetWait``, a ctypes call that
lets go of the GIL) up to WAIT_SLICE_S at a time: the measuring threads never wait for it, and it
takes the GIL only for an event (rare) or the sample (a few NVML reads per GPU a second).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from .health import Nvml, ask, const, handle_key, is_available, not_available

# NVML event types watched (nvmlEventType*), by the name the record gives them
EVENT_TYPES = (("single_bit_ecc", "nvmlEventTypeSingleBitEccError", 0x1),
               ("double_bit_ecc", "nvmlEventTypeDoubleBitEccError", 0x2),
               ("xid", "nvmlEventTypeXidCriticalError", 0x8),
               ("dram_retirement", "nvmlEventTypeDramRetirementEvent", 0x400),
               ("dram_retirement_failure", "nvmlEventTypeDramRetirementFailure", 0x800),
               ("nonfatal_poison", "nvmlEventTypeNonFatalPoisonError", 0x1000),
               ("fatal_poison", "nvmlEventTypeFatalPoisonError", 0x2000),
               ("gpu_unavailable", "nvmlEventTypeGpuUnavailableError", 0x4000),
               ("gpu_recovery_action", "nvmlEventTypeGpuRecoveryAction", 0x8000))
TIMEOUT_CODE = 10   # NVML_ERROR_TIMEOUT: no event within the wait
WAIT_SLICE_S = 0.2  # the longest single wait inside NVML: how long stop() may take


class HealthWatch:
    """Start with ``start()``, end with ``stop()``; ``on_event(dict)`` is called (in the watch's
    thread) for each event as it arrives; ``watched`` says per GPU what is watched or why not;
    ``seen()`` gives per GPU the highest PCIe generation and width, temperature and power sampled."""

    def __init__(self, nvml: Nvml, gpus: list[tuple[int, object]], on_event: Callable[[dict], None],
                 period_s: float = 1.0):
        self.nv = nvml.nv
        self.gpus = gpus
        self.on_event = on_event
        self.period_s = period_s
        self.watched: dict[int, object] = {}
        self.errors: list[str] = []
        self._by_handle = {handle_key(h): i for i, h in gpus}
        self._seen: dict[int, dict] = {i: {"samples": 0} for i, _h in gpus}
        self._stop = threading.Event()
        self._set = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> "HealthWatch":
        self._register()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="commbench-health", daemon=True)
        self._thread.start()
        return self

    def _register(self) -> None:
        event_set = ask(self.nv, "nvmlEventSetCreate")
        if not is_available(event_set):
            self.watched = {i: event_set for i, _h in self.gpus}
            return
        self._set = event_set
        for i, h in self.gpus:
            supported = ask(self.nv, "nvmlDeviceGetSupportedEventTypes", h)
            if not is_available(supported):
                self.watched[i] = supported
                continue
            wanted = [(name, bit) for name, attr, default in EVENT_TYPES
                      for bit in [const(self.nv, attr, default)] if int(supported) & bit]
            if not wanted:
                self.watched[i] = not_available("the GPU offers none of the watched event types")
                continue
            mask = 0
            for _name, bit in wanted:
                mask |= bit
            done = ask(self.nv, "nvmlDeviceRegisterEvents", h, mask, event_set)
            self.watched[i] = [n for n, _b in wanted] if is_available(done) else done

    def _loop(self) -> None:
        next_sample = time.monotonic() + self.period_s
        while not self._stop.is_set():
            wait_s = min(WAIT_SLICE_S, max(0.0, next_sample - time.monotonic()))
            if self._set is not None:
                self._wait(int(wait_s * 1000))
            else:
                self._stop.wait(wait_s)
            if time.monotonic() >= next_sample and not self._stop.is_set():
                self._sample()
                next_sample = time.monotonic() + self.period_s

    def _wait(self, timeout_ms: int) -> None:
        try:
            data = self.nv.nvmlEventSetWait_v2(self._set, timeout_ms)
        except self.nv.NVMLError as exc:
            if getattr(exc, "value", None) != TIMEOUT_CODE:
                self.errors.append(str(exc))
                self._stop.wait(timeout_ms / 1000.0)   # never spin on a failing wait
            return
        self._deliver(data)

    def _deliver(self, data) -> None:
        kind = int(data.eventType)
        name = next((n for n, attr, default in EVENT_TYPES if const(self.nv, attr, default) == kind), f"type {kind:#x}")
        event = {"gpu": self._by_handle.get(handle_key(data.device)), "event": name, "data": int(data.eventData),
                 "t": round(time.time(), 3)}
        if name == "xid":
            event["xid"] = int(data.eventData)
        try:
            self.on_event(event)
        except Exception as exc:  # noqa: BLE001 - a failing store must not end the watch
            self.errors.append(f"storing an event: {exc}")

    def _sample(self) -> None:
        for i, h in self.gpus:
            got = {"pcie_gen": ask(self.nv, "nvmlDeviceGetCurrPcieLinkGeneration", h),
                   "pcie_width": ask(self.nv, "nvmlDeviceGetCurrPcieLinkWidth", h),
                   "temperature_c": ask(self.nv, "nvmlDeviceGetTemperature", h,
                                        const(self.nv, "NVML_TEMPERATURE_GPU", 0)),
                   "power_w": ask(self.nv, "nvmlDeviceGetPowerUsage", h)}
            if is_available(got["power_w"]):
                got["power_w"] = round(got["power_w"] / 1000.0, 3)
            with self._lock:
                seen = self._seen[i]
                seen["samples"] += 1
                for key, value in got.items():
                    if is_available(value):
                        seen[key + "_max"] = max(value, seen.get(key + "_max", value))

    def seen(self) -> dict[int, dict]:
        with self._lock:
            return {i: dict(s) for i, s in self._seen.items()}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_SLICE_S * 2 + 1.0)
        if self._set is not None and (self._thread is None or not self._thread.is_alive()):
            ask(self.nv, "nvmlEventSetFree", self._set)
            self._set = None
