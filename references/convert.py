"""Build the reference run folders under references/ from the measured CSVs in docs/measurements/.

    python references/convert.py          # rewrites references/<machine>/<name>/

Each reference is a run folder the reader takes (`compare`, `report`, `accept --baseline`):
results.csv copied byte for byte from the measurement, and run.json with the machine as that
measurement's info.json recorded it, plus a ``reference`` block saying where the rows came from,
when and on what they were measured, and what was not kept (per-iteration samples among them).
Nothing is computed or filled in: a field the measurement did not record is absent.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = "docs/measurements"
NOT_KEPT = ("samples.csv (per-iteration times), results.jsonl, plan.json, logs/: only results.csv "
            "was kept. compare takes the noise from the other side's samples; against another run "
            "without samples a change of the threshold or more is can't tell.")

# (folder under references/, source CSV, info.json or None, suite file, suite, date, command, notes)
SOURCES = (
    ("h200x1/collectives", "2026-11-29-h200x1-call2/collectives-results.csv", "2026-11-29-h200x1-call2/info.json",
     "suites/collectives.yaml", "collectives", "2026-11-29",
     "bash tests/gpu/session.sh build families suites (collectives: commbench run suites/collectives.yaml)",
     "1 rank on 1 GPU: busbw is 0 for most ops, as in nccl-tests. Measured before the nccl "
     "backend's timed loop rotated its buffers (docs/metrics.md, 'Buffer rotation'): points whose "
     "buffers fit in L2 may differ from today's commbench for that reason. The suite has gained "
     "gather and scatter since: compare lists them as new."),
    ("h200x1/allreduce-algos", "2026-11-29-h200x1-call2/allreduce-results.csv", "2026-11-29-h200x1-call2/info.json",
     "suites/allreduce-algos.yaml", "allreduce-algos", "2026-11-29",
     "bash tests/gpu/session.sh build families suites (allreduce-algos: commbench run suites/allreduce-algos.yaml)",
     "Stopped at its 50 s bound: the rows measured until then; compare lists the others as new."),
    ("h200x1/parity", "2026-12-01-h200x1-parity-rotation/commbench-results.csv", None,
     "suites/parity.yaml", "parity", "2026-12-01",
     "bash tests/gpu/session.sh parity (commbench run suites/parity.yaml)",
     "Machine as docs/measurements/2026-12-01-h200x1-parity-rotation/README.md records it: nvidia-h200 "
     "(1x NVIDIA H200), NCCL 2.28.9, torch 2.11 + CUDA 13.0, multicast kill switches set; no info.json "
     "was kept for this call. Buffers rotated (the default since)."),
    ("h200x2/x2", "2026-11-29-h200x2/x2-results.csv", "2026-11-29-h200x2/info.json",
     "tests/gpu/suites/x2.yaml", "x2", "2026-11-29",
     "commbench run tests/gpu/suites/x2.yaml",
     "2 ranks on 2 GPUs joined by NVLink (NV18): NCCL collectives, the all-reduce kernels, NVSHMEM "
     "put/get, MoE dispatch/combine at EP2."),
)


def run_json(info: dict | None, suite_file: str, suite: str, date: str, command: str, source: str,
             info_path: str | None, notes: str) -> dict:
    meta = {"schema_version": 1}
    meta.update(info or {})
    meta.update(suite=suite, suite_file=suite_file)
    revision = (info or {}).get("git_revision")
    commit = revision or "not recorded by the run"
    if revision and (info or {}).get("git_dirty"):
        commit += " (its working tree had uncommitted changes)"
    meta["reference"] = {
        "measured_on": date,
        "machine": (f"{len(info['gpus'])}x {info['gpus'][0]['name']}, driver {info.get('driver')}, "
                    f"NCCL {info.get('nccl')}, torch {info.get('torch')}" if info and info.get("gpus") else notes),
        "commit": commit,
        "command": command,
        "converted_from": f"{MEASURED}/{source} (results.csv is that file, byte for byte)",
        "machine_info": f"{MEASURED}/{info_path}" if info_path else "not kept",
        "not_kept": NOT_KEPT,
        "notes": notes,
    }
    return meta


def build(out_root: Path = ROOT / "references") -> list[Path]:
    made = []
    for name, source, info_path, suite_file, suite, date, command, notes in SOURCES:
        folder = out_root / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / MEASURED / source, folder / "results.csv")
        info = json.loads((ROOT / MEASURED / info_path).read_text()) if info_path else None
        meta = run_json(info, suite_file, suite, date, command, source, info_path, notes)
        (folder / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
        made.append(folder)
    return made


if __name__ == "__main__":
    for path in build():
        print(path.relative_to(ROOT))
