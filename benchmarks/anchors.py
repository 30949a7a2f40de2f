"""The anchors in one call: our low-latency dispatch/combine against DeepEP's, the expert kernel
against its roofline, and proxy command delivery against its targets, as one Markdown report.

    PYTHONPATH=.:/path/to/deepep python benchmarks/anchors.py --out docs/measurements/DATE-anchors.md
    python benchmarks/anchors.py --quick --sections ll --shapes issue,h7168-e256-t128,h4096-e64-t256-k6

Sections (each in processes of its own, see anchors_sections.py): ``ll`` (ipc_ll and nvshmem_ll
against DeepEP v1.2.1 LL per shape and dispatch dtype, BF16 and FP8: kernel time and per op in a
CUDA graph, ours / DeepEP; the check at 1, 2 and 4 ranks sharing the GPU), ``ep`` (normal-mode
dispatch/combine of our ipc kernels, DeepEP and UCCL-EP at deepseek-v3's shape, with the three
times; UCCL-EP ran or skipped with its reason), ``experts`` (per model,
phase and GEMM path: % of the roofline against decode >= 85%, prefill >= 70%), ``ceiling`` (the
prefill step's measured ceiling: cuBLAS on the same FLOPs and the weights read once, beside the
grouped kernels), ``proxy`` (delivery
p50 <= 2.5 us, rate >= 100 M commands/s at the family's defaults). Exit 0 when everything ran and
every row was right; 1 with the reasons otherwise (a missed target too, with --strict); 2 for a
bad argument. ``--out FILE.md`` also writes FILE.json with every record.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import anchors_report as rep  # noqa: E402
import anchors_sections as run  # noqa: E402
import moe_expert_ceiling as ceiling  # noqa: E402
import moe_ll_vs_deepep as ll  # noqa: E402

SECTIONS = ("ll", "ep", "experts", "ceiling", "proxy")   # the report's order
RUN_ORDER = ("proxy", "ll", "ep", "experts", "ceiling")  # the cheapest first, so a call cut short keeps the most
MIN_SECTION_S = 15                      # less left of --budget-s: the section is not started
TITLES = {"ll": "Low-latency dispatch/combine: ours vs DeepEP",
          "ep": "Normal-mode dispatch/combine: ours, DeepEP and UCCL-EP",
          "experts": "Expert kernel against its roofline",
          "ceiling": "Expert step at prefill: the measured ceiling", "proxy": "Proxy command delivery"}


def _dist(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine(deepep_note: str) -> dict:
    """GPU, driver, date and commit (moe_ll_vs_deepep.machine), the library versions."""
    from commbench.sysinfo.machine import collect

    base = ll.machine()
    facts = collect(probe_gpu=False)
    gpu, _, driver = base["gpu"].partition(", ")
    return {"gpu": f"{base['gpus']}x {gpu}", "gpus": base["gpus"], "driver": driver or None, "date": base["date"],
            "commit": base["commit"], "torch": facts.get("torch"), "cuda": facts.get("torch_cuda"),
            "nccl": facts.get("nccl"), "triton": _dist("triton"), "deepep": deepep_note}


def section_ll(res: dict) -> tuple[list[str], bool]:
    recs = res["records"]
    verdict, met = rep.ll_verdicts(recs, "" if res["deepep_ran"] else res["deepep"])
    lines = [f"## {TITLES['ll']}", "",
             f"DeepEP: {res['deepep']}. One rank, every expert local, our kernels on every SM; "
             "times in us; ratio columns are ours / DeepEP (target <= 1.00).", "", *verdict, "",
             "### Kernel time (device duration per launch, torch profiler, median)", "",
             *ll.speed_table(recs, "kernel_us"), "",
             "### Per op in a replayed CUDA graph (launches included, back to back)", "",
             *ll.speed_table(recs, "graph_us"), "",
             "### API: one call as a user makes it (host clock around the call and a synchronize, "
             "median)", "", *ll.speed_table(recs, "api_us"), "",
             "### Correctness (1 rank: every shape; more ranks sharing the GPU: the check shapes)", "",
             *ll.check_table(recs), ""]
    variants = sorted({r["ll_variant"] for r in recs if r.get("ll_variant")})
    if variants:
        lines[4:4] = [f"Our kernels: {'; '.join(variants)} (`ll_variant`).", ""]
    return lines, met


def section_ep(res: dict) -> tuple[list[str], bool | None]:
    where = (f"{res['ranks']} ranks sharing one GPU: correctness only, the times are not comparable"
             if res["shared"] else f"{res['ranks']} ranks, one per GPU")
    return [f"## {TITLES['ep']}", "",
            f"`commbench run {run.EP_SUITE.relative_to(ROOT)}`: {where}. UCCL-EP: {res['uccl_ep']}. "
            "Times in us per call (time: CUDA events over back-to-back calls; API: host clock around one "
            "call and a synchronize; kernel only: the device activity in each call's window). A skipped "
            "row gives the library's or commbench's reason.", "",
            *rep.ep_table(res["records"]), ""], None   # times side by side, no target


def section_experts(res: dict) -> tuple[list[str], bool]:
    verdict, met = rep.expert_verdicts(res["records"])
    return [f"## {TITLES['experts']}", "",
            "benchmarks/moe_experts.py: every expert local at one rank; roofline = max(bytes / HBM "
            "bandwidth, FLOPs / tensor-core peak) (docs/metrics.md); time = mean of calls back to back.", "",
            *verdict, "", *rep.expert_table(res["records"]), ""], met


def section_ceiling(res: dict) -> tuple[list[str], None]:
    return [f"## {TITLES['ceiling']}", "",
            "benchmarks/moe_expert_ceiling.py: the step's FLOPs as one dense MLP (cuBLAS; ours on one expert) "
            "and its weight bytes read once, beside the grouped step; ceiling = roofline / the slower of the "
            "dense GEMM and the weight read (what a kernel overlapping them perfectly at these rates reaches).",
            "", *ceiling.verdicts(res["records"], res["summaries"], rep.EXPERT_PCT_MIN), "",
            *ceiling.summary_table(res["summaries"]),
            "", *ceiling.row_table(res["records"]), ""], None   # the target is the experts section's


def section_proxy(res: dict) -> tuple[list[str], bool]:
    verdict, met = rep.proxy_verdicts(res["records"], res["defaults"])
    d = res["defaults"]
    return [f"## {TITLES['proxy']}", "",
            f"`commbench run {run.PROXY_SUITE.relative_to(ROOT)}` --only "
            f"{' --only '.join(run.PROXY_BENCHES)} (executor none); the verdicts take the family's "
            f"delivery defaults ({', '.join(f'{k} {v}' for k, v in d.items())}).", "",
            *verdict, "", *rep.proxy_table(res["records"], d), ""], met


RENDER = {"ll": section_ll, "ep": section_ep, "experts": section_experts, "ceiling": section_ceiling,
          "proxy": section_proxy}


def render(info: dict, sections: list[str], quick: bool, results: dict, strict: bool,
           skipped: dict[str, str]) -> tuple[str, int, list[str]]:
    out = rep.header(info, sections, quick)
    met: dict[str, bool] = {}
    for sec in sections:
        if sec not in results:
            out += [f"## {TITLES[sec]}", "", f"Not run: {skipped.get(sec, 'not reached yet')}.", ""]
            continue
        lines, ok = RENDER[sec](results[sec])
        if ok is not None:
            met[sec] = ok
        out += lines
    problems = {s: results[s]["problems"] for s in sections if s in results}
    problems.update({s: [f"not run: {skipped.get(s, 'not reached')}"] for s in sections if s not in results})
    code, reasons = rep.exit_status(problems, met, strict)
    out += ["## Result", "", f"Exit {code}: " + ("every section ran and every row was right"
                                                  if not reasons else "; ".join(reasons)) + ".",
            ("Targets: " + ", ".join(f"{s} {'met' if ok else 'not met'}" for s, ok in met.items()) + "."
             if met else "Targets: none in these sections."), ""]
    return "\n".join(out), code, reasons


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="Markdown report (and FILE.json with every record beside it)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="any of " + ",".join(SECTIONS))
    ap.add_argument("--shapes", default="issue", help="ll: presets (issue = the issue's four: "
                    f"{', '.join(rep.ISSUE_SHAPES)}) and hHIDDEN-eEXPERTS[-tTOKENS][-kTOPK] shapes, "
                    "e.g. issue,h7168-e256-t128; each with BF16 and FP8 dispatch")
    ap.add_argument("--quick", action="store_true", help="fewer iterations; experts: grouped_mm and fused "
                    "only; ll: the check at 2 ranks on the first shape")
    ap.add_argument("--strict", action="store_true", help="a missed target exits 1 too")
    ap.add_argument("--timeout", type=int, default=0, help="seconds per process (default 150, --quick 90; "
                    "the experts' process gets twice as long)")
    ap.add_argument("--budget-s", type=int, default=0, help="seconds for the whole call (0: no limit); "
                    "processes are cut to what is left and a section with too little left is not run")
    args = ap.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    bad = [s for s in sections if s not in SECTIONS]
    try:
        named, specs = rep.parse_shapes(args.shapes, ll.workers.SHAPES)
        if bad:
            raise ValueError(f"--sections: unknown {bad}; choose from {', '.join(SECTIONS)}")
    except ValueError as exc:
        ap.error(str(exc))
    timeout_s = args.timeout or (90 if args.quick else 150)
    work = Path(tempfile.mkdtemp(prefix="anchors-"))
    info = machine(run.deepep_found()[1])
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    deadline = time.monotonic() + args.budget_s if args.budget_s else None

    def limit(seconds: int) -> int:   # a process's timeout within --budget-s
        return seconds if deadline is None else min(seconds, int(deadline - time.monotonic()))

    def write() -> tuple[str, int, list[str]]:   # after every step: a call cut short keeps its rows
        text, code, reasons = render(info, sections, args.quick, results, args.strict, skipped)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
            args.out.with_suffix(".json").write_text(json.dumps(
                {"machine": info, "sections": results, "exit": code, "reasons": reasons}, indent=1, default=str))
        return text, code, reasons

    write()
    for sec in (s for s in RUN_ORDER if s in sections):
        if limit(MIN_SECTION_S) < MIN_SECTION_S:
            skipped[sec] = f"less than {MIN_SECTION_S} s of --budget-s {args.budget_s} left"
        elif sec == "ll":   # its processes in turn, each with what is left when it starts
            results["ll"] = run.run_ll(work, named, specs, args.quick, lambda: max(1, limit(timeout_s)))
        elif sec == "experts":
            results["experts"] = run.run_experts(work, args.quick, limit(2 * timeout_s))
        elif sec == "ceiling":
            results["ceiling"] = run.run_ceiling(work, args.quick, limit(timeout_s))
        elif sec == "ep":
            results["ep"] = run.run_ep(work, args.quick, limit(timeout_s), info["gpus"])
            results["ep"]["uccl_ep"] = run.uccl_ep_found()
        else:
            results["proxy"] = run.run_proxy(work, args.quick, limit(timeout_s))
        write()
    text, code, reasons = write()
    print(text)
    for r in reasons:
        print(f"anchors: {r}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
