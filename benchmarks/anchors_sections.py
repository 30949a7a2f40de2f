"""The measuring half of benchmarks/anchors.py: each section runs in processes of its own.

ll: benchmarks/moe_ll_vs_deepep.py's workers (ours, DeepEP, ours at several ranks sharing the GPU);
experts: benchmarks/moe_experts.py (its CLI, JSON rows); proxy: `commbench run` on
tests/gpu/suites/proxy-delivery.yaml (the delivery defaults' latency and the rate), read back from
results.csv; ep: `commbench run` on tests/gpu/suites/ep-baselines.yaml (normal-mode dispatch and
combine: ours, DeepEP and UCCL-EP at one shape; every GPU of the node, or 2 ranks sharing one).
Each returns a dict: the records, ``problems`` (failed processes, errors, wrong rows) and notes.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import anchors_report as rep
import moe_ll_vs_deepep as ll

ROOT = Path(__file__).resolve().parent.parent
PROXY_SUITE = ROOT / "tests" / "gpu" / "suites" / "proxy-delivery.yaml"
PROXY_BENCHES = ("delivery-latency-defaults", "delivery-rate")
EP_SUITE = ROOT / "tests" / "gpu" / "suites" / "ep-baselines.yaml"


def deepep_found() -> tuple[bool, str]:
    """(importable, a note naming its version and where it was found, or why not)."""
    spec = importlib.util.find_spec("deep_ep")
    if spec is None:
        return False, "DeepEP (deep_ep) is not importable: add its build to PYTHONPATH"
    try:
        from importlib.metadata import version
        ver = version("deep_ep")
    except Exception:  # noqa: BLE001 - a source build has no distribution metadata
        ver = "version unknown"
    where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
    return True, f"{os.environ.get('COMMBENCH_DEEPEP_VERSION') or ver} at {Path(where).parent}"


def uccl_ep_found() -> str:
    """Where UCCL-EP's DeepEP-compatible wrapper (uccl_deep_ep) was found, or why not."""
    spec = importlib.util.find_spec("uccl_deep_ep")
    if spec is None:
        return "uccl_deep_ep is not importable (tests/gpu/build_uccl_ep.sh builds it), its rows skip"
    where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
    return f"UCCL da914a2's wrapper at {Path(where).parent}"


def run_ll(work: Path, named: list[str], specs: list[str], quick: bool, timeout_s) -> dict:
    """Ours (ipc_ll, nvshmem_ll) and DeepEP at one rank, then ours at 2 (and 4) ranks for the check;
    ``timeout_s`` per process (or a function giving it as each starts)."""
    path = work / "ll.jsonl"
    path.unlink(missing_ok=True)
    shapes = named + [ll.add_shape(s) for s in specs]
    have, note = deepep_found()
    failures = ll.measure(path, named + [s.partition(":")[0] for s in specs], specs,
                          iters=10 if quick else 20, tokens=ll.workers.TOKENS, variants=[],
                          ranks=[2] if quick else [2, 4],
                          check_shapes=shapes[:1] if quick else shapes, deepep=have,
                          timeout_s=timeout_s)
    recs = ll.load(path)
    return {"records": recs, "problems": failures + rep.ll_problems(recs), "deepep": note,
            "deepep_ran": have}


def _python_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(cmd: list[str], timeout_s: int, log: Path | None = None) -> int:
    """Run ``cmd`` from the repository root; with ``log`` its output goes there (and then to ours)."""
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    fh = open(log, "w") if log else None   # closed below, after the process
    try:
        rc = subprocess.run(cmd, timeout=max(1, timeout_s), cwd=ROOT, env=_python_env(), stdout=fh,
                            stderr=subprocess.STDOUT if fh else None).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    finally:
        if fh:
            fh.close()
            print(log.read_text(), end="", flush=True)
    print(f"exit {rc} after {time.monotonic() - t0:.0f} s (limit {timeout_s} s)", flush=True)
    return rc


def run_experts(work: Path, quick: bool, timeout_s: int) -> dict:
    """benchmarks/moe_experts.py at decode and prefill; quick: grouped_mm and fused, 3 iterations."""
    out, log = work / "experts.json", work / "experts.out"
    out.unlink(missing_ok=True)
    gemms = ["grouped_mm", "fused"] if quick else ["grouped_mm", "loop", "fused"]
    rc = _run([sys.executable, str(ROOT / "benchmarks" / "moe_experts.py"), "--phases", "decode", "prefill",
               "--gemms", *gemms, "--iters", "3" if quick else "10", "--json", str(out)], timeout_s, log)
    if out.exists():
        rows = json.loads(out.read_text())
    else:   # cut short: the rows it printed
        from commbench.families.moe.presets import PHASE_TOKENS

        rows = rep.expert_rows_from_output(log.read_text(), PHASE_TOKENS)
    problems = rep.expert_problems(rows)
    if rc and not (rc == 1 and problems):   # moe_experts exits 1 for wrong rows, listed already
        problems.append(f"benchmarks/moe_experts.py: exit {rc}" + (" (timed out)" if rc == 124 else "")
                        + f", {len(rows)} row(s)")
    return {"records": rows, "problems": problems}


def run_ceiling(work: Path, quick: bool, timeout_s: int) -> dict:
    """benchmarks/moe_expert_ceiling.py at prefill (qwen3-235b-a22b, deepseek-v3): the dense GEMM and
    the weight read beside the grouped step; quick: 5 calls per path."""
    out, log = work / "ceiling.json", work / "ceiling.out"
    out.unlink(missing_ok=True)
    rc = _run([sys.executable, str(ROOT / "benchmarks" / "moe_expert_ceiling.py"), "--iters", "5" if quick else "20",
               "--json", str(out)], timeout_s, log)
    got = json.loads(out.read_text()) if out.exists() else {"rows": [], "summaries": []}
    rows, summaries = got["rows"], got["summaries"]
    problems = [f"ceiling: {r['model']} {r['phase']} {r['path']}: {r['wrong']} wrong" for r in rows if r["wrong"]]
    if rc and not (rc == 1 and problems):   # the script exits 1 for wrong rows, listed already
        problems.append(f"benchmarks/moe_expert_ceiling.py: exit {rc}" + (" (timed out)" if rc == 124 else "")
                        + f", {len(summaries)} model(s) measured")
    return {"records": rows, "summaries": summaries, "problems": problems}


def _clean(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def proxy_defaults() -> dict:
    from commbench.families.proxy.family import FAMILY

    return {k: FAMILY.params[k].default for k in rep.DELIVERY_SETTINGS}


def _run_suite(suite: Path, out: Path, args: list[str], timeout_s: int) -> tuple[list[dict], list[str]]:
    """`commbench run SUITE` into ``out``: its rows (NaN as None) and what went wrong with the run."""
    from commbench.runfolder.reader import load

    rc = _run([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet", *args],
              timeout_s)
    try:
        rows = [_clean(r) for r in load(out).to_dict("records")]
    except Exception as exc:  # noqa: BLE001 - no run folder: the reason is the problem
        rows = []
        rc = rc or f"{type(exc).__name__}: {exc}"
    bad = rc and not (rc == 1 and rows)   # exit 1 with rows: the rows say what was not right
    return rows, ([f"commbench run {suite.name}: exit {rc}{'' if rows else ', no rows'}"] if bad or not rows else [])


def run_proxy(work: Path, quick: bool, timeout_s: int) -> dict:
    """The proxy suite's delivery-latency-defaults and delivery-rate benchmarks through the runner."""
    only = [a for b in PROXY_BENCHES for a in ("--only", b)]
    rows, problems = _run_suite(PROXY_SUITE, work / "proxy-run", only, timeout_s)
    return {"records": rows, "problems": rep.proxy_problems(rows) + problems, "defaults": proxy_defaults(),
            "run_dir": str(work / "proxy-run")}


def run_ep(work: Path, quick: bool, timeout_s: int, gpus: int) -> dict:
    """Normal-mode dispatch/combine of ours, DeepEP and UCCL-EP: one rank per GPU on a node with 2
    or more, else 2 ranks sharing the one GPU (correctness only); quick: the smaller size alone."""
    shared = gpus < 2
    args = ["--set", "ranks=2", "--share-gpu"] if shared else ["--set", f"ranks={gpus}"]
    if quick:
        args += ["--set", "sizes=[1792KiB]", "--set", "iters=5"]
    rows, problems = _run_suite(EP_SUITE, work / "ep-run", args, timeout_s)
    return {"records": rows, "problems": rep.ep_problems(rows) + problems, "shared": shared,
            "ranks": 2 if shared else gpus, "run_dir": str(work / "ep-run")}
