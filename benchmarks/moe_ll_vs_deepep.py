"""Our low-latency MoE dispatch/combine (ipc_ll, nvshmem_ll) against DeepEP's low-latency mode.

At one rank, for the decode shapes of docs/families/moe.md (128 tokens; BF16 and FP8
dispatch), each implementation runs in a process of its own (NVSHMEM comes up once per process)
and reports its kernels' device times (torch profiler), per-op times in a replayed CUDA graph and the
API time of one call (host clock around the call and a synchronize);
the table gives ours / DeepEP per shape. Then ranks sharing the GPU run our kernels for
correctness only (`wrong`, calc_diff). The Markdown names the machine, the date and the commit.

    PYTHONPATH=.:/path/to/deepep python benchmarks/moe_ll_vs_deepep.py --out docs/measurements/DATE-h200x1-moe-ll.md
    python benchmarks/moe_ll_vs_deepep.py --variants staged,per_expert,rows_fenced   # A/B
    COMMBENCH_MOE_LL_COMBINE=per_expert ncu -k regex:ll_combine -c 1 python \
        benchmarks/moe_ll_vs_deepep.py --worker launches --shapes deepseek-v3 --iters 3
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import moe_ll_workers as workers  # noqa: E402

FORWARD_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "COMMBENCH_JIT_CACHE", "NCCL_NVLS_ENABLE",
               "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_SYMMETRIC_SIZE")


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """COMMBENCH_COMMIT, else this tree's git HEAD; "unknown" when the tree is not itself a git
    checkout (a copy inside another repository would name that repository's HEAD)."""
    if os.environ.get("COMMBENCH_COMMIT"):
        return os.environ["COMMBENCH_COMMIT"]
    top = _sh(["git", "rev-parse", "--show-toplevel"])
    if not top or Path(top).resolve() != ROOT:
        return "unknown"
    return _sh(["git", "rev-parse", "--short", "HEAD"]) or "unknown"


def machine() -> dict:
    gpu = _sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    commit_ = commit()
    return {"gpu": gpu.splitlines()[0] if gpu else "unknown", "gpus": len(gpu.splitlines()),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit_}


def spawn(argv: list[str], timeout_s: int, ranks: int = 0) -> int:
    """One worker process (or an mpirun of ``ranks``); its output goes to ours."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    if ranks:
        fwd = [a for k in FORWARD_ENV if k in os.environ for a in ("-x", k)]
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), *fwd, *cmd]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    print(f"exit {rc} after {time.monotonic() - t0:.0f} s (limit {timeout_s} s)", flush=True)
    return rc


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def speed_table(recs: list[dict], key: str) -> list[str]:
    """Ours vs DeepEP per shape and dtype, at one rank, default combine; ``key`` picks the timer."""
    def find(impl, shape, dtype):
        for r in recs:
            if (r["impl"], r["shape"], r["dtype"], r["ranks"]) == (impl, shape, dtype, 1) and \
                    not r.get("check") and r["variant"] in ("default", "v1.2.1"):
                return r
        return {}

    lines = ["| shape | dispatch dtype | ipc_ll dispatch / combine | nvshmem_ll dispatch / combine "
             "| DeepEP dispatch / combine | combine ours / DeepEP (ipc, nvshmem) "
             "| dispatch ours / DeepEP (ipc, nvshmem) |", "|" + " --- |" * 7]
    for shape in workers.SHAPES:
        for dtype in workers.DTYPES:
            ipc, shm, dep = (find(i, shape, dtype) for i in ("ipc_ll", "nvshmem_ll", "deepep_ll"))
            if not (ipc or shm or dep):
                continue
            d, c = f"dispatch_{key}", f"combine_{key}"
            lines.append(
                f"| {shape} | {dtype} | {_f(ipc.get(d))} / {_f(ipc.get(c))} | {_f(shm.get(d))} / "
                f"{_f(shm.get(c))} | {_f(dep.get(d))} / {_f(dep.get(c))} | "
                f"{_ratio(ipc.get(c), dep.get(c))}, {_ratio(shm.get(c), dep.get(c))} | "
                f"{_ratio(ipc.get(d), dep.get(d))}, {_ratio(shm.get(d), dep.get(d))} |")
    return lines


def variant_table(recs: list[dict]) -> list[str]:
    """ipc_ll's kernel times (dispatch / combine) per variant, shape and dtype."""
    rows = [r for r in recs if r["impl"] == "ipc_ll" and r["ranks"] == 1 and not r.get("check")]
    names = list(dict.fromkeys(r["variant"] for r in rows))
    if len(names) < 2:
        return []
    lines = ["| shape | dispatch dtype | " + " | ".join(names) + " |", "|" + " --- |" * (len(names) + 2)]
    for shape in workers.SHAPES:
        for dtype in workers.DTYPES:
            got = {r["variant"]: r for r in rows if (r["shape"], r["dtype"]) == (shape, dtype)}
            if got:
                lines.append(f"| {shape} | {dtype} | " + " | ".join(
                    f"{_f(got.get(n, {}).get('dispatch_kernel_us'))} / "
                    f"{_f(got.get(n, {}).get('combine_kernel_us'))}" for n in names) + " |")
    return lines


def check_table(recs: list[dict]) -> list[str]:
    lines = ["| ranks | impl | shape | dtype | wrong | calc_diff |", "|" + " --- |" * 6]
    for r in recs:
        if r.get("check") or r["impl"] == "deepep_ll":
            wrong = (f"skipped: {r['skipped']}" if r.get("skipped") else
                     r.get("wrong") if "error" not in r else f"failed: {r['error']}")
            lines.append(f"| {r['ranks']} | {r['impl']} | {r['shape']} | {r['dtype']} | "
                         f"{wrong} | {_f(r.get('calc_diff'), '{:.1e}')} |")
    return lines


def report(recs: list[dict], info: dict, failures: list[str]) -> str:
    out = [f"# Low-latency MoE dispatch/combine: ours vs DeepEP ({info['date']})", "",
           f"Machine: {info['gpus']}x {info['gpu']} (name, driver). Commit {info['commit']}. "
           f"{workers.TOKENS} tokens per rank (decode), one rank, every expert local; our kernels on every "
           "SM (as DeepEP's low-latency kernels). Times in us.", "",
           "## Kernel time (device duration per launch, torch profiler, median)", "",
           *speed_table(recs, "kernel_us"), "",
           "## Per op in a replayed CUDA graph (launches included, back to back)", "",
           *speed_table(recs, "graph_us"), "",
           "## API: one call as a user makes it (host clock around the call and a synchronize, "
           "median)", "", *speed_table(recs, "api_us"), ""]
    var = variant_table(recs)
    if var:
        out += ["## Variants (ipc_ll kernel time, dispatch / combine; COMMBENCH_MOE_LL_DISPATCH, "
                "COMMBENCH_MOE_LL_COMBINE; send_only and reduce_only: the default combine's halves "
                "alone)", "", *var, ""]
    out += ["## Correctness", "", *check_table(recs), ""]
    if failures:
        out += ["## Failures", "", *[f"- {f}" for f in failures], ""]
    return "\n".join(out)


def add_shape(spec: str) -> str:
    """Register ``NAME:hidden=H,experts=E,topk=K[,tokens=T]`` (random routing); returns NAME."""
    name, _, kv = spec.partition(":")
    workers.SHAPES[name] = {"routing": "random",
                            **{k: int(v) for k, v in (f.split("=") for f in kv.split(","))}}
    return name


def measure(path: Path, shapes: list[str], specs: list[str], *, iters: int, tokens: int,
            variants: list[str], ranks: list[int], check_shapes: list[str], deepep: bool,
            timeout_s, failures: list[str] | None = None, progress=lambda: None) -> list[str]:
    """Run the workers (ours and DeepEP at one rank, ours at each of ``ranks`` sharing the GPU
    for the check) into the JSON lines at ``path``; ``specs`` are add_shape's extra shapes,
    measured beside ``shapes``. ``timeout_s``: seconds per worker, or a function giving them
    when the worker starts. ``progress`` runs after every worker. Appends the failures to
    ``failures`` and returns it."""
    failures = [] if failures is None else failures
    common = ["--jsonl", str(path), "--iters", str(iters), "--tokens", str(tokens),
              *[a for spec in specs for a in ("--shape", spec)]]
    extra = {s.partition(":")[0] for s in specs}
    named = ",".join(s for s in shapes if s not in extra)
    jobs = [("ours at 1 rank", ["--worker", "ours", "--shapes", named,
                                "--variants", ",".join(variants), *common], 0)]
    if deepep:
        jobs.append(("DeepEP at 1 rank", ["--worker", "deepep", "--shapes", named, *common], 0))
    for n in ranks:
        jobs.append((f"ours at {n} ranks sharing the GPU",
                     ["--worker", "ours", "--check-only", "--shapes", ",".join(check_shapes), *common], n))
    for what, argv, n in jobs:
        rc = spawn(argv, timeout_s() if callable(timeout_s) else timeout_s, ranks=n)
        if rc:
            failures.append(f"{what}: exit {rc}")
        progress()
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=("ours", "deepep", "launches"),
                    help="run one measuring process here; 'launches': only --iters dispatch + combine "
                         "pairs of ipc_ll BF16 for the first of --shapes (to run under ncu or nsys)")
    ap.add_argument("--jsonl", help=argparse.SUPPRESS)
    ap.add_argument("--check-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", default=",".join(workers.SHAPES))
    ap.add_argument("--variants", default="", help="more dispatch or combine variants to time (ipc_ll), "
                    "e.g. staged,per_expert,rows_fenced")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ranks", default="2,4", help="rank counts sharing the GPU for the check ('' = none)")
    ap.add_argument("--check-shapes", default="deepseek-v3,mixtral-8x7b")
    ap.add_argument("--no-deepep", action="store_true")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per worker process")
    ap.add_argument("--out", type=Path, help="Markdown file (default: stdout only)")
    ap.add_argument("--records", type=Path, help="keep the JSON lines here")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME:hidden=H,experts=E,topk=K[,tokens=T]",
                    help="one more shape (random routing), measured with the others; repeatable")
    ap.add_argument("--tokens", type=int, default=workers.TOKENS, help="tokens per rank")
    args = ap.parse_args()
    extra = [add_shape(spec) for spec in args.shape]
    workers.TOKENS = args.tokens
    shapes = [s for s in args.shapes.split(",") if s] + extra
    variants = [v for v in args.variants.split(",") if v]
    if args.worker:
        return workers.main(args.worker, args.jsonl, shapes, variants, args.iters, args.check_only)

    info = machine()
    path = args.records or Path(tempfile.mkdtemp()) / "records.jsonl"
    failures: list[str] = []

    def write() -> str:   # after every worker, so a run cut short keeps what it measured
        text = report(load(path), info, failures)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
        return text

    measure(path, shapes, args.shape, iters=args.iters, tokens=args.tokens, variants=variants,
                        ranks=[int(r) for r in args.ranks.split(",") if r],
                        check_shapes=[s for s in args.check_shapes.split(",") if s],
                        deepep=not args.no_deepep, timeout_s=args.timeout, failures=failures, progress=write)
    print(write())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
