"""The machine an nccl-tests run ran on, for the bounds of its imported rows: `import nccl-tests
--machine` takes an `info --json` file or a commbench run folder (its run.json) from that machine;
both hold ``hostname`` and ``links`` (docs/info.md). The machine must be one of the hosts the
nccl-tests files name, so a bound never comes from another machine's links."""
from __future__ import annotations

import json
import math
from pathlib import Path

from commbench.errors import CommbenchError

from ..bounds import row_bound


class MachineError(CommbenchError):
    """--machine names no usable description of the machine."""


def load_machine(path: Path, hosts: list[str]) -> dict:
    """{"hostname", "links", "from"} of ``path`` (an info --json file, a run.json, or a run folder)."""
    path = Path(path)
    src = path / "run.json" if path.is_dir() else path
    try:
        doc = json.loads(src.read_text())
    except OSError as exc:
        raise MachineError(f"--machine {path}: cannot read {src} ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MachineError(f"--machine {path}: {src} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("links"), dict):
        raise MachineError(f"--machine {path}: {src} describes no links (want the output of "
                           f"`commbench info --json` on that machine, or a run folder from it)")
    name = str(doc.get("hostname") or "")
    short = {h.split(".")[0] for h in hosts}   # nccl-tests prints the host name up to its first dot
    if name.split(".")[0] not in short:
        raise MachineError(f"--machine {path}: describes host {name or '(unnamed)'}, but the nccl-tests files ran "
                           f"on {', '.join(sorted(hosts))}: its links would bound another machine's numbers")
    return {"hostname": name, "links": doc["links"], "from": str(path)}


def fill_bounds(rows: list[dict], links: dict) -> None:
    """bound_gbps, bound_link, bound_reason and pct_of_bound of each row (analysis/bounds.py's rules)."""
    for row in rows:
        limit, reason = row_bound(row, links)
        busbw = row.get("busbw_gbps")
        row["bound_gbps"] = round(limit.gbps, 2) if limit else None
        row["bound_link"] = limit.link if limit else ""
        row["bound_reason"] = reason
        ok = limit and limit.gbps > 0 and isinstance(busbw, (int, float)) and math.isfinite(busbw)
        row["pct_of_bound"] = round(busbw / limit.gbps * 100, 1) if ok else None
