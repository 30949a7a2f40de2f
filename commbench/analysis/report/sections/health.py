"""GPU health: one part per node, a row per GPU and launch from health.jsonl (docs/results.md): new
ECC errors, remapped rows, XIDs, the PCIe link against its maximum, PCIe and NVLink errors, time
throttled, temperature, power and energy, each from the launch's start to its end. Counters the
card or driver does not offer are listed with NVML's reason, never shown as 0.
Data: analysis/health_view.py; the verdicts on them: analysis/accept/health_rules.py."""
from __future__ import annotations

import pandas as pd

from ...health_view import RunHealth, delta, dig, links_down, nvlink_errors, run_health, seen_max, \
    unavailable_counters
from ....errors import RunFolderError
from ....runfolder.health_files import has_health
from ....sysinfo.health import is_available
from .base import ReportSection

NA = "n/a"


def _views(report) -> list[tuple]:
    out = []
    for run in report.runs:
        if has_health(run.path):
            try:
                out.append((run, run_health(run.path), ""))
            except RunFolderError as exc:
                out.append((run, None, str(exc)))
    return out


def applies(report) -> bool:
    return any(has_health(run.path) for run in report.runs)


def _num(value, fmt: str = "{:g}") -> str:
    return fmt.format(value) if is_available(value) and isinstance(value, (int, float)) else NA


def _rows(g) -> str:
    rows = dig(g.end or g.start, "remapped_rows")
    if not isinstance(rows, dict):
        return NA
    flags = "".join(f" {k}" for k in ("pending", "failure") if rows.get(k))
    return f"{rows.get('correctable', 0)} corr / {rows.get('uncorrectable', 0)} unc{flags}"


def _pcie(g) -> str:
    gen, width = seen_max(g, "gen", "pcie_gen_max"), seen_max(g, "width", "pcie_width_max")
    top = g.end or g.start
    return (f"Gen{_num(gen)} of Gen{_num(dig(top, 'pcie.gen_max'))}, "
            f"x{_num(width)} of x{_num(dig(top, 'pcie.width_max'))}")


def _throttled(g) -> str:
    parts = []
    for reason in ("hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap"):
        d = delta(g, f"throttle_ns.{reason}")
        if is_available(d) and d > 0:
            parts.append(f"{reason} {d / 1e6:.0f} ms")
    return ", ".join(parts) or "none"


def _nvlink(g) -> str:
    errs = nvlink_errors(g)
    if not isinstance(errs, dict):
        return NA
    down = links_down(g)
    text = "; ".join(f"link {k}: " + ", ".join(f"+{n} {c}" for c, n in v.items()) for k, v in errs.items())
    return ", ".join(x for x in (text, f"down: {down}" if down else "") if x) or "no new errors"


def gpu_table(gpus: list) -> pd.DataFrame:
    return pd.DataFrame([{
        "launch": g.launch_id if not g.attempt else f"{g.launch_id} (try {g.attempt})", "gpu": g.gpu,
        "name": g.name, "seconds": _num(g.duration_s, "{:.1f}") if g.duration_s is not None else "no end",
        "new SBE": _num(delta(g, "ecc.volatile_sbe")), "new DBE": _num(delta(g, "ecc.volatile_dbe")),
        "remapped rows": _rows(g), "XIDs": ", ".join(map(str, g.xids())) or "none",
        "PCIe seen": _pcie(g), "PCIe replays": _num(delta(g, "pcie.replay_counter"), "+{:g}"),
        "NVLink": _nvlink(g), "throttled": _throttled(g),
        "max °C": _num(dig(g.end, "during.temperature_c_max")), "max W": _num(dig(g.end, "during.power_w_max")),
        "energy J": _num(delta(g, "energy_j"), "{:.0f}")} for g in gpus])


def _node(sub, view: RunHealth, host: str) -> None:
    gpus = [g for g in view.gpus if g.host == host]
    events = [e for g in gpus for e in g.events]
    sub.text(f"{len({g.gpu for g in gpus})} GPU(s) over {len({(g.launch_id, g.attempt) for g in gpus})} "
             f"launch(es); {len(events)} event(s) during them.")
    sub.table(gpu_table(gpus))
    missing: dict[str, str] = {}
    for g in gpus:
        for name, why in unavailable_counters(g).items():
            missing.setdefault(name, why)
    if missing:
        sub.text("Not available on this node: " + "; ".join(f"{k} ({v.split(': ', 1)[-1]})"
                                                             for k, v in sorted(missing.items())) + ".")


def add(doc, report) -> None:
    sec = doc.section("GPU health")
    sec.text("Read through NVML by local rank 0 of each node at the start and end of every launch, with "
             "XID and ECC events in between (health.jsonl; docs/results.md). Per GPU and launch: new "
             "single- and double-bit ECC errors (volatile), remapped rows at the end, XIDs, the highest PCIe "
             "generation and width seen against the link's maximum, new PCIe replays and NVLink errors, time "
             "the clocks were held down, the highest temperature and power sampled, energy used. n/a: the "
             "card or driver does not offer the counter (the reason is listed). `commbench accept` judges "
             "them with the rules' health part (docs/accept.md).")
    many = len(report.runs) > 1
    for run, view, error in _views(report):
        part = sec.sub(run.label) if many else sec
        if view is None:
            part.text(f"health.jsonl could not be read: {error}")
            continue
        for host, why in sorted(view.no_nvml.items()):
            part.text(f"{host}: no GPU health ({why.split(': ', 1)[-1]}).")
        for host in sorted({g.host for g in view.gpus}):
            _node(part.sub(f"Node {host}"), view, host)


SECTION = ReportSection("health", 28, add, applies)
