"""Read a run of tests/gpu/suites/profile.yaml (and optionally NCCL Inspector's dump of the same
suite run without our plugin) and print the profiling targets of issue 17, one line per point.

    python3 tests/gpu/profile_compare.py RUN [INSPECTOR_DUMP_DIR]

Targets (several GPUs): every collective recorded; |kernel_us / time_us - 1| <= 5% at >= 1 MiB;
profiled time_us within 2% of the plain run's at >= 1 MiB; on one GPU: "no events (1 rank)".
Exit 1 when a target is missed.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median

import pandas as pd

INSPECTOR_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
                   "broadcast": "Broadcast", "reduce": "Reduce", "alltoall": "AlltoAll", "sendrecv": "SendRecv"}
ELEM = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}


def inspector_times(folder: Path) -> dict[tuple[str, int], float]:
    """(collective, message bytes) -> median exec time (us) over Inspector's dumped records."""
    found = defaultdict(list)
    dec = json.JSONDecoder()
    for path in folder.rglob("*.log"):
        text, i = path.read_text(errors="replace"), 0
        while True:
            while i < len(text) and text[i] not in "{":
                i += 1
            if i >= len(text):
                break
            try:
                obj, i = dec.raw_decode(text, i)
            except json.JSONDecodeError:
                i += 1
                continue
            perf = obj.get("coll_perf") if isinstance(obj, dict) else None
            if perf:
                found[(perf["coll"], int(perf["coll_msg_size_bytes"]))].append(float(perf["coll_exec_time_us"]))
    return {k: median(v) for k, v in found.items()}


def main(argv: list[str]) -> int:
    run = Path(argv[0])
    df = pd.read_csv(run / "results.csv")
    insp = inspector_times(Path(argv[1])) if len(argv) > 1 else {}
    prof = df[df.bench == "nccl-profiled"]
    plain = df[df.bench == "plain"].set_index(["op", "size_bytes"])
    missed = []
    world = int(prof.world_size.max())
    print(f"world_size {world}; {len(prof)} profiled points")
    for r in prof.itertuples():
        line = (f"{r.op:15s} {int(r.size_bytes):>11d} B  status {r.status}  wrong {r.wrong}  "
                f"time_us {r.time_us:10.2f}"
                f"  kernel_us {getattr(r, 'kernel_us', float('nan')):10.2f}  ch {getattr(r, 'nccl_channels', '')}"
                f"  {getattr(r, 'nccl_algo', '')}/{getattr(r, 'nccl_proto', '')}"
                f"  note {getattr(r, 'profile_note', '')}")
        if r.status != "ok" or r.wrong:
            missed.append(f"{r.op} {r.size_bytes}: {r.status} {r.reason}")
        if world == 1:
            if str(getattr(r, "profile_note", "")) != "no events (1 rank)":
                missed.append(f"{r.op} {r.size_bytes}: 1 rank but note {getattr(r, 'profile_note', '')!r}")
        elif r.size_bytes >= 1 << 20 and r.status == "ok":
            ratio = r.kernel_us / r.time_us if r.time_us else float("nan")
            line += f"  kernel/time {ratio:.3f}"
            if not abs(ratio - 1) <= 0.05:
                missed.append(f"{r.op} {r.size_bytes}: kernel/time {ratio:.3f}")
            if (r.op, r.size_bytes) in plain.index:
                base = float(plain.loc[(r.op, r.size_bytes), "time_us"])
                over = r.time_us / base - 1
                line += f"  profiled/plain {over:+.2%}"
                if over > 0.02:
                    missed.append(f"{r.op} {r.size_bytes}: profiling costs {over:+.2%}")
            key = (INSPECTOR_NAMES.get(r.op, r.op), int(r.count) * ELEM.get(r.dtype, 4))
            if key in insp:
                line += f"  inspector_us {insp[key]:.1f}"
        elif world > 1 and not (r.kernel_us > 0):
            missed.append(f"{r.op} {r.size_bytes}: no kernel time recorded")
        print(line)
    print("MISSED:\n  " + "\n  ".join(missed) if missed else "all profiling targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
