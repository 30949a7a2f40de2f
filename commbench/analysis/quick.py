"""`commbench nccl OP -b 8 -e 8G -f 2 ...`: one collective over a size sweep, typed as nccl-tests
is typed. The options become a one-benchmark suite of the collectives family, which runs through
the same path as `commbench run` (a normal run folder, its suite.yaml the suite it ran), and the
stored rows are printed as nccl-tests' per-size table (docs/quick.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommbenchError
from ..units import format_size, parse_size
from .nccl_tests_options import RANK_TIME_RUNNABLE as RANK_TIME
from .nccl_tests_options import REGISTER, flag

# -d as nccl-tests and commbench spell them -> commbench's dtype
DTYPES = {"float": "float32", "float32": "float32", "fp32": "float32", "f32": "float32",
          "half": "float16", "float16": "float16", "fp16": "float16", "f16": "float16",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "int32": "int32", "int": "int32"}
BACKENDS = ("nccl", "torch_nccl", "gloo", "mpi")
CPU_BACKENDS = ("gloo", "mpi")
CPU_DEFAULT_RANKS = 2


@dataclass(frozen=True)
class QuickArgs:
    """The nccl-tests options, as given (defaults as nccl-tests', apart from -b/-e: 8 B to 128 MiB)."""
    op: str
    backend: str = "nccl"
    min_bytes: str = "8"
    max_bytes: str = "128M"
    step_factor: float = 2.0
    step_bytes: str | None = None
    iters: int = 20
    warmup: int = 5
    ranks: int | None = None
    dtype: str = "float"
    redop: str = "sum"
    check: int = 1
    graph: int = 0
    register: int = 0        # -R
    unalign: int = 0         # -u: elements, as nccl-tests (offset_bytes = u x the element size)
    average: int = 3         # -a: commbench's default is the slowest rank (nccl-tests' own default is 1)


def _size(text: str, flag: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise CommbenchError(f"{flag} {text}: {exc}") from None


def suite_dict(a: QuickArgs) -> dict:
    """The one-benchmark suite the options describe (what the run folder's suite.yaml holds)."""
    from ..comm.ops import OPS, no_in_place_reason

    if a.op not in OPS:
        raise CommbenchError(f"unknown op {a.op!r}: one of {', '.join(OPS)}")
    if a.backend not in BACKENDS:
        raise CommbenchError(f"--backend {a.backend}: one of {', '.join(BACKENDS)}")
    dtype = DTYPES.get(a.dtype.lower())
    if dtype is None:
        raise CommbenchError(f"-d {a.dtype}: one of {', '.join(sorted(DTYPES))}")
    lo, hi = _size(a.min_bytes, "-b"), _size(a.max_bytes, "-e")
    if lo > hi:
        raise CommbenchError(f"-b {a.min_bytes} is above -e {a.max_bytes}")
    if not math.isfinite(a.step_factor) or (a.step_factor < 1):
        raise CommbenchError(f"{flag('step_factor')} {a.step_factor:g}: the size factor must be above 1, or 1 "
                             f"with {flag('step_bytes')} SIZE for a fixed step (nccl-tests' -f 2 doubles the size)")
    if a.step_factor > 1:          # nccl-tests: a factor above 1 wins over -i
        sizes: object = {"min": lo, "max": hi, "factor": a.step_factor}
    elif a.step_bytes is not None:
        sizes = {"min": lo, "max": hi, "step": _size(a.step_bytes, "-i")}
    else:
        sizes = [lo] if lo == hi else {"min": lo, "max": hi, "step": 1 << 20}   # nccl-tests' -i 1M
    if a.register not in REGISTER:
        raise CommbenchError(f"-R {a.register}: 0 (none), 1 (user registration) or 2 (symmetric window)")
    if a.average not in RANK_TIME:
        raise CommbenchError(f"-a {a.average}: 0 (rank 0), 1 (avg), 2 (min) or 3 (max)")
    ranks: object = a.ranks if a.ranks is not None else (CPU_DEFAULT_RANKS if a.backend in CPU_BACKENDS else "all")
    bench = {"name": f"{a.backend}-{a.op}", "family": "collectives", "backends": [a.backend], "ops": [a.op],
             "dtypes": [dtype], "sizes": sizes, "ranks": ranks, "warmup": a.warmup, "iters": a.iters,
             "params": {"in_place": [False] if no_in_place_reason(a.op) else [False, True],
                        "reduce_op": a.redop}}
    from ..dtypes import size_bytes as elem_bytes

    extra = {"register": REGISTER[a.register], "offset_bytes": a.unalign * elem_bytes(dtype),
             "rank_time": RANK_TIME[a.average]}
    defaults = {"register": "none", "offset_bytes": 0, "rank_time": "max"}
    bench["params"].update({k: v for k, v in extra.items() if v != defaults[k]})   # suite.yaml names what changed
    if a.graph:
        bench["timing"] = "graph"
    return {"name": f"quick-{a.op}",
            "description": f"commbench nccl {a.op}: one collective as nccl-tests sweeps it",
            "benchmarks": [bench]}


def refuse_without_gpu(a: QuickArgs) -> None:
    """The GPU backends on a machine with no GPU: exit 2 with what to type instead."""
    from ..sysinfo.gpus import gpu_count
    from ..world import inside_mpi_job

    if a.backend not in CPU_BACKENDS and not inside_mpi_job() and gpu_count() == 0:
        raise CommbenchError(f"the {a.backend} backend needs a GPU and none is visible here "
                             f"(nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them); "
                             f"on CPU: commbench nccl {a.op} --backend mpi -g 2 (or --backend gloo)")


def write_suite(a: QuickArgs, folder: Path) -> Path:
    import yaml

    path = Path(folder) / f"quick-{a.op}.yaml"
    path.write_text("# written by `commbench nccl` from its options\n"
                    + yaml.safe_dump(suite_dict(a), sort_keys=False))
    return path


def table_of(rows: list[dict], a: QuickArgs, links: dict | None = None) -> str:
    """nccl-tests' table of a quick run's stored rows, with what the options changed and, below
    it, each row's ceiling from the machine's ``links`` (run.json; analysis/bounds.py)."""
    from ..comm.ops import no_in_place_reason
    from .nccl_tests.table import format_table

    notes = []
    if no_in_place_reason(a.op):
        notes.append(f"# in-place: N/A ({no_in_place_reason(a.op)})")
    if not a.check:
        notes.append("# -c 0: commbench checks every Case anyway, untimed, after the timed iterations")
    world = next((r.get("world_size") for r in rows if r.get("world_size")), "?")
    first = (f"# commbench nccl {a.op}: backend {a.backend}, {world} rank(s), warmup iters: {a.warmup} "
             f"iters: {a.iters} timing: {'graph' if a.graph else 'auto'}")
    return "\n".join([first, *notes, format_table(rows), *bound_lines(rows, links)])


def bound_lines(rows: list[dict], links: dict | None) -> list[str]:
    """Comment lines under the table: per bound (one per link and size range), the best busbw
    against it; or why there is none."""
    from .bounds import row_bound

    groups: dict[tuple, list[dict]] = {}
    reasons: dict[str, int] = {}
    for row in rows:
        if row.get("status") != "ok":
            continue
        limit, reason = row_bound(row, links)
        if limit is None:
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            groups.setdefault((limit.link, round(limit.gbps, 2)), []).append(row)
    out = []
    for (link, gbps), group in groups.items():
        best = max(group, key=lambda r: float(r.get("busbw_gbps") or 0))
        sizes = sorted(int(r["size_bytes"]) for r in group)
        span = format_size(sizes[0]) + ("" if sizes[0] == sizes[-1] else f"..{format_size(sizes[-1])}")
        side = "in place" if str(best.get("in_place")).lower() in ("true", "1") else "out of place"
        pct = float(best.get("busbw_gbps") or 0) / gbps * 100 if gbps > 0 else float("nan")
        out.append(f"# Bound {span}: {gbps:g} GB/s ({link}); best busbw {float(best.get('busbw_gbps') or 0):.2f} "
                   f"GB/s = {pct:.1f}% of it at {format_size(int(best['size_bytes']))} {side}")
    out += [f"# Bound: none for {n} row(s): {reason}" for reason, n in reasons.items()]
    return out
