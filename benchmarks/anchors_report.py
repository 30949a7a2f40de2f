"""The pure half of benchmarks/anchors.py: shape parsing, the targets, verdicts and Markdown tables.

No torch and no GPU here (unit-tested on CPU); the measuring half hands in plain records:
the LL workers' JSON lines, moe_experts.py's JSON rows, the proxy suite's results.csv rows.
"""
from __future__ import annotations

import re

LL_RATIO_MAX = 1.0            # ours / DeepEP, dispatch and combine, at every shape
EXPERT_PCT_MIN = {"decode": 85.0, "prefill": 70.0}   # % of the expert roofline, best kernel
PROXY_P50_MAX_US = 2.5        # delivery latency, the family's defaults
PROXY_RATE_MIN_MOPS = 100.0   # delivery rate, the family's defaults
ISSUE_SHAPES = ("deepseek-v3", "qwen3-235b-a22b", "mixtral-8x7b", "h6144-e128")
DELIVERY_SETTINGS = ("publish", "head", "poll_delay_ns")   # what the proxy suite sweeps
MAX_LL_TOKENS = 12288         # the low-latency dispatch's shared-memory token list
SHAPE_RE = re.compile(r"h(\d+)-e(\d+)(?:-t(\d+))?(?:-k(\d+))?")


def parse_shape(text: str) -> str:
    """``hH-eE[-tT][-kK]`` (hidden, experts, tokens per rank = 128, top-k = min(8, E)) as the
    LL benchmark's ``NAME:hidden=H,experts=E,topk=K,tokens=T``; ValueError when unusable."""
    m = SHAPE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"shape {text!r}: expected a preset ({', '.join(ISSUE_SHAPES)}) or "
                         "hHIDDEN-eEXPERTS[-tTOKENS][-kTOPK], e.g. h7168-e256-t128")
    hidden, experts = int(m[1]), int(m[2])
    tokens = int(m[3]) if m[3] else 128
    topk = int(m[4]) if m[4] else min(8, experts)
    if hidden % 128 or not 128 <= hidden <= 65536:
        raise ValueError(f"shape {text!r}: hidden must be a multiple of 128 (FP8 scale blocks), 128-65536")
    if not 1 <= experts <= 1024 or not 1 <= topk <= min(32, experts):
        raise ValueError(f"shape {text!r}: experts 1-1024 and top-k 1-min(32, experts)")
    if not 1 <= tokens <= MAX_LL_TOKENS:
        raise ValueError(f"shape {text!r}: tokens per rank 1-{MAX_LL_TOKENS} (low-latency mode)")
    return f"{text}:hidden={hidden},experts={experts},topk={topk},tokens={tokens}"


def parse_shapes(text: str, known) -> tuple[list[str], list[str]]:
    """``--shapes``: comma-separated presets (``known``), ``issue`` (the issue's four) and
    hH-eE[-tT][-kK] shapes -> (preset names, extra shape specs), in order, no repeats."""
    named: list[str] = []
    specs: list[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item == "issue":
            named += [s for s in ISSUE_SHAPES if s not in named]
        elif item in known:
            named += [] if item in named else [item]
        else:
            spec = parse_shape(item)
            specs += [] if spec in specs else [spec]
    if not named and not specs:
        raise ValueError("--shapes names no shape")
    return named, specs


def _f(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _n(v) -> str:
    """A count as an integer (results.csv reads them back as floats)."""
    return "-" if v is None else str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _ll_speed(recs: list[dict]) -> list[dict]:
    """Rank-1 timing records at the default kernels (ours) and DeepEP's."""
    return [r for r in recs if r.get("ranks") == 1 and not r.get("check") and "error" not in r
            and "skipped" not in r and r.get("variant") in ("default", "v1.2.1")]


def ll_ratios(recs: list[dict]) -> list[dict]:
    """Ours / DeepEP per shape, dtype, transport, op (dispatch, combine) and timer (kernel, graph)."""
    speed = _ll_speed(recs)
    dep = {(r["shape"], r["dtype"]): r for r in speed if r["impl"] == "deepep_ll"}
    out = []
    for r in speed:
        d = dep.get((r["shape"], r["dtype"]))
        if r["impl"] == "deepep_ll" or d is None:
            continue
        for op in ("dispatch", "combine"):
            for timer in ("kernel", "graph"):
                key = f"{op}_{timer}_us"
                ours, theirs = r.get(key), d.get(key)
                out.append({"shape": r["shape"], "dtype": r["dtype"], "impl": r["impl"], "op": op,
                            "timer": timer, "ours_us": ours, "deepep_us": theirs,
                            "ratio": ours / theirs if ours is not None and theirs else None})
    return out


def ll_verdicts(recs: list[dict], deepep_note: str = "") -> tuple[list[str], bool]:
    """One verdict line per op (ours / DeepEP <= 1.0 at every shape, dtype, transport, timer);
    returns (lines, every target met). ``deepep_note`` says why DeepEP did not run."""
    ratios = ll_ratios(recs)
    ours = {(r["shape"], r["dtype"]) for r in _ll_speed(recs) if r["impl"] != "deepep_ll"}
    compared = {(r["shape"], r["dtype"]) for r in ratios}
    if not ratios:
        why = deepep_note or "no DeepEP timing beside ours"
        return [f"**Verdict: no comparison** ({why}); our rows are below."], False
    lines, met = [], True
    for op in ("dispatch", "combine"):
        rows = [r for r in ratios if r["op"] == op]
        missing = [r for r in rows if r["ratio"] is None]
        over = [r for r in rows if r["ratio"] is not None and r["ratio"] > LL_RATIO_MAX]
        worst = max((r["ratio"] for r in rows if r["ratio"] is not None), default=None)
        if over:
            met = False
            where = "; ".join(f"{r['shape']} {r['dtype']} {r['impl']} {r['timer']} {r['ratio']:.2f}"
                              for r in sorted(over, key=lambda r: -r["ratio"]))
            lines.append(f"**Verdict {op}: not met** (ours / DeepEP <= {LL_RATIO_MAX:.2f}): {len(over)} of "
                         f"{len(rows)} over: {where}.")
        else:
            lines.append(f"**Verdict {op}: met**: ours / DeepEP <= {LL_RATIO_MAX:.2f} at every shape, dtype, "
                         f"transport and timer ({len(rows) - len(missing)} ratios, the largest {_f(worst, '{:.2f}')}).")
        if missing:
            met = False
            lines.append(f"  {len(missing)} {op} ratio(s) without a time (profiler or graph failed).")
    refused = {(r["shape"], r["dtype"]): r["skipped"] for r in recs
               if r.get("impl") == "deepep_ll" and r.get("skipped")}
    lonely = sorted(ours - compared - set(refused))
    if lonely:
        met = False
        lines.append("  No DeepEP time for: " + ", ".join(f"{s} {d}" for s, d in lonely) + ".")
    beyond = sorted(k for k in refused if k in ours)
    if beyond:   # not a miss: DeepEP has no kernel for these shapes, so there is nothing to compare
        lines.append("  Not compared (DeepEP skipped them before calling it): "
                     + "; ".join(f"{s} {d}: {refused[(s, d)]}" for s, d in beyond) + ".")
    return lines, met


def ll_problems(recs: list[dict]) -> list[str]:
    """Every LL record that failed or came back wrong (ours at any rank count, or DeepEP's)."""
    out = []
    for r in recs:
        where = f"{r.get('impl')} {r.get('shape')} {r.get('dtype')} at {r.get('ranks')} rank(s)"
        if r.get("skipped"):
            continue   # a shape the library cannot take, said in the verdict, not a failure
        if r.get("error"):
            out.append(f"{where}: {r['error']}")
        elif ("wrong" in r) and r["wrong"] is None:
            out.append(f"{where}: no check result")
        elif r.get("wrong"):
            out.append(f"{where}: wrong = {r['wrong']}")
    return out


def expert_table(rows: list[dict]) -> list[str]:
    """One line per model x phase x gemm: time, roofline, % of it, the phase's target."""
    lines = ["| model | phase | tokens | gemm | time_us | roofline_us (bound) | % of roofline | target | "
             "HBM TB/s | TFLOP/s | SM MHz | wrong |", "|" + " --- |" * 12]
    for r in rows:
        target = EXPERT_PCT_MIN.get(r.get("phase"))
        mark = "-" if target is None or r.get("pct_of_roofline") is None else (
            "met" if r["pct_of_roofline"] >= target else "not met")
        lines.append(f"| {r['model']} | {r.get('phase', '-')} | {r.get('tokens')} | {r['gemm']} | "
                     f"{_f(r.get('time_us'))} | {_f(r.get('roofline_us'))} ({r.get('bound', '-')}) | "
                     f"{_f(r.get('pct_of_roofline'))} | >= {_f(target, '{:.0f}')}%: {mark} | "
                     f"{_f(r.get('hbm_tbps'), '{:.2f}')} | {_f(r.get('tflops'))} | "
                     f"{r.get('sm_clock_mhz') or '-'} | {r.get('wrong')} |")
    return lines


def expert_verdicts(rows: list[dict]) -> tuple[list[str], bool]:
    """Per phase: the best kernel of each model at its target? (lines, every target met)."""
    lines, met = [], bool(rows)
    for phase, target in EXPERT_PCT_MIN.items():
        best: dict[str, dict] = {}
        for r in rows:
            if r.get("phase") == phase and r.get("pct_of_roofline") is not None and not r.get("wrong"):
                if r["model"] not in best or r["pct_of_roofline"] > best[r["model"]]["pct_of_roofline"]:
                    best[r["model"]] = r
        models = sorted({r["model"] for r in rows if r.get("phase") == phase})
        if not models:
            continue
        got = ", ".join(f"{m} {best[m]['gemm']} {best[m]['pct_of_roofline']:.1f}%" if m in best
                        else f"{m} no correct row" for m in models)
        ok = all(m in best and best[m]["pct_of_roofline"] >= target for m in models)
        met &= ok
        lines.append(f"**Verdict {phase}: {'met' if ok else 'not met'}** (best kernel >= {target:.0f}% of "
                     f"the roofline): {got}.")
    if not lines:
        lines.append("**Verdict: no rows**.")
    return lines, met


def expert_rows_from_output(text: str, phase_tokens: dict[str, int]) -> list[dict]:
    """moe_experts.py's printed rows (its header line names the columns; the fused tiles follow
    the last after a space), for a run cut short before it wrote its JSON; the phase follows
    from the tokens."""
    phases = {t: p for p, t in phase_tokens.items()}
    cols, rows = None, []
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0] == "model":
            cols = cells
        elif cols and len(cells) >= len(cols) and not line.startswith("#"):
            cells = cells[:len(cols)]
            cells[-1] = cells[-1].split(" ", 1)[0]
            row = {c: _number(v) for c, v in zip(cols, cells)}
            rows.append({**row, "phase": phases.get(row.get("tokens"), "-")})
    return rows


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return None if text in ("", "None") else text


def expert_problems(rows: list[dict]) -> list[str]:
    return [f"{r['model']} {r.get('phase')} {r['gemm']}: wrong = {r['wrong']}" for r in rows if r.get("wrong")]


def _same(a, b) -> bool:
    """Equal settings, a number read back from CSV as a float included (400.0 == 400)."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _is_default(row: dict, defaults: dict) -> bool:
    return all(_same(row.get(k), v) for k, v in defaults.items() if k in DELIVERY_SETTINGS)


def proxy_table(rows: list[dict], defaults: dict) -> list[str]:
    lines = ["| bench | op | publish | head | poll_delay_ns | proxy threads | latency p50 / p99 us | "
             "rate M commands/s | defaults | wrong | status |", "|" + " --- |" * 11]
    for r in rows:
        lines.append(f"| {r.get('bench')} | {r.get('op')} | {r.get('publish')} | {r.get('head')} | "
                     f"{_n(r.get('poll_delay_ns'))} | {_n(r.get('proxy_threads'))} | "
                     f"{_f(r.get('latency_p50_us'), '{:.2f}')} / {_f(r.get('latency_p99_us'), '{:.2f}')} | "
                     f"{_f(r.get('rate_mops'))} | {'yes' if _is_default(r, defaults) else ''} | "
                     f"{_n(r.get('wrong'))} | {r.get('status')} |")
    return lines


def proxy_verdicts(rows: list[dict], defaults: dict) -> tuple[list[str], bool]:
    """Latency p50 and rate at the family's delivery defaults against the targets."""
    ok_rows = [r for r in rows if r.get("status") == "ok" and _is_default(r, defaults)]
    lat = [r for r in ok_rows if r.get("op") == "latency" and r.get("latency_p50_us") is not None]
    rate = [r for r in ok_rows if r.get("op") == "rate" and r.get("rate_mops") is not None]
    found: dict[str, tuple[bool, str] | None] = {"latency": None, "rate": None}
    if lat:
        p50, p99 = min(r["latency_p50_us"] for r in lat), min(r.get("latency_p99_us") or 0 for r in lat)
        found["latency"] = (all(r["latency_p50_us"] <= PROXY_P50_MAX_US for r in lat),
                            f"p50 {p50:.2f} us (p99 {p99:.2f}) against <= {PROXY_P50_MAX_US} us.")
    if rate:
        mops = min(r["rate_mops"] for r in rate)
        found["rate"] = (mops >= PROXY_RATE_MIN_MOPS,
                         f"{mops:.1f} M commands/s against >= {PROXY_RATE_MIN_MOPS:.0f}.")
    lines = [_verdict(name, *v) if v else f"**Verdict {name}: no row** at the delivery defaults."
             for name, v in found.items()]
    return lines, all(v is not None and v[0] for v in found.values())


def _verdict(name: str, ok: bool, detail: str) -> str:
    return f"**Verdict {name}: {'met' if ok else 'not met'}**: {detail}"


def proxy_problems(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        where = f"{r.get('bench')} {r.get('publish')}/{r.get('head')}/{r.get('poll_delay_ns')}"
        if r.get("status") != "ok":
            out.append(f"{where}: {r.get('status')}: {str(r.get('error') or r.get('reason') or '')[:200]}")
        elif r.get("wrong"):
            out.append(f"{where}: wrong = {r['wrong']}")
    return out


EP_BACKENDS = ("ipc", "deepep", "uccl_ep")   # ours, DeepEP, UCCL-EP: tests/gpu/suites/ep-baselines.yaml


def ep_problems(rows: list[dict]) -> list[str]:
    """Failed or timed-out rows and wrong elements; a skipped row carries its reason and is none."""
    out = []
    for r in rows:
        where = f"{r.get('op')} {r.get('backend')} {_n(r.get('size_bytes'))} B"
        if r.get("status") not in ("ok", "skipped"):
            out.append(f"{where}: {r.get('status')}: {str(r.get('error') or r.get('reason') or '')[:200]}")
        elif r.get("wrong"):
            out.append(f"{where}: wrong = {_n(r['wrong'])}")
    return out


def _tokens(r: dict):
    """Tokens per rank: the row's own, else (a skipped row) its BF16 size over the hidden size."""
    if r.get("tokens_per_rank") is not None:
        return r["tokens_per_rank"]
    return int(r["size_bytes"]) // (2 * int(r["hidden"])) if r.get("size_bytes") and r.get("hidden") else None


def ep_table(rows: list[dict]) -> list[str]:
    """One line per op, size and backend: the three times, ours and UCCL-EP's time over DeepEP's."""
    deepep = {(r.get("op"), r.get("size_bytes")): r.get("time_us") for r in rows
              if r.get("backend") == "deepep" and r.get("status") == "ok"}
    order = {b: i for i, b in enumerate(EP_BACKENDS)}
    lines = ["| op | tokens per rank | backend | status | time us | API us | kernel only us | "
             "time / DeepEP's | wrong | reason |", "|" + " --- |" * 10]
    for r in sorted(rows, key=lambda r: (str(r.get("op")), r.get("size_bytes") or 0,
                                         order.get(r.get("backend"), 9))):
        base = deepep.get((r.get("op"), r.get("size_bytes")))
        ratio = r["time_us"] / base if base and r.get("time_us") and r.get("status") == "ok" else None
        lines.append(f"| {r.get('op')} | {_n(_tokens(r))} | {r.get('backend')} | {r.get('status')} | "
                     f"{_f(r.get('time_us'))} | {_f(r.get('api_us'))} | {_f(r.get('kernel_only_us'))} | "
                     f"{_f(ratio, '{:.2f}')} | {_n(r.get('wrong'))} | {str(r.get('reason') or '')[:160]} |")
    return lines


def header(info: dict, sections: list[str], quick: bool) -> list[str]:
    """Title and the machine: GPU, driver, versions, DeepEP, date (UTC) and commit."""
    keys = ("gpu", "driver", "torch", "cuda", "nccl", "triton", "deepep")
    return ["# Anchors: low-latency dispatch/combine vs DeepEP, normal-mode EP baselines, the expert kernel, "
            "proxy delivery", "",
            f"Date {info.get('date', '-')}, commit {info.get('commit', '-')}, sections {', '.join(sections)}"
            f"{' (--quick)' if quick else ''}.", "",
            "| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys),
            "| " + " | ".join(str(info.get(k) or "-") for k in keys) + " |", ""]


def exit_status(problems: dict[str, list[str]], targets_met: dict[str, bool], strict: bool) -> tuple[int, list[str]]:
    """0, or 1 with the reasons: a failed section or a wrong row; with ``strict`` a missed target."""
    reasons = [f"{sec}: {p}" for sec, ps in problems.items() for p in ps]
    if strict:
        reasons += [f"{sec}: a target was not met" for sec, ok in targets_met.items() if not ok]
    return (1 if reasons else 0), reasons
