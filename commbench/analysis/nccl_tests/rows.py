"""One nccl-tests invocation (a TestRun) -> result rows and samples with commbench's columns.

Each result line becomes two rows (out-of-place, in-place) keyed exactly as a `commbench run` of
the collectives family (nccl backend) keys the same point. Bandwidths are recomputed with
commbench.metrics and must agree with the file's to its printed precision; a row of another op
under a header, sizes and counts that disagree, or an unknown type are NcclTestsFormatErrors
naming the file and line (docs/import.md)."""
from __future__ import annotations

import re

from commbench import dtypes, metrics
from commbench.comm.ops import OPS as COLLECTIVE_OPS
from commbench.comm.ops import ROOT, no_in_place_reason

from .records import NcclTestsFormatError, ResultLine, Side, TestRun
from .settings import reduced_times, settings_of

SOURCE = "nccl-tests"
# nccl-tests binary (without _perf and a build suffix such as _mpi) -> commbench op: the same names.
OPS = {op: op for op in COLLECTIVE_OPS}
# nccl-tests type name -> commbench dtype (bytes from commbench.dtypes); char/int are pre-2.x names.
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
          "int8": "int8", "char": "int8", "uint8": "uint8", "int32": "int32", "int": "int32",
          "uint32": "uint32", "int64": "int64", "uint64": "uint64", "f8e4m3": "float8_e4m3",
          "f8e5m2": "float8_e5m2"}
# Slack on top of the printed rounding when comparing bandwidths (float arithmetic only).
BW_SLACK = 1.01
# Ops whose nccl-tests table prints redop "none" (no reduction); sendrecv prints "sum" regardless.
NO_REDOP = ("all_gather", "alltoall", "broadcast", "alltoallv")


def op_of(run: TestRun) -> str:
    """The commbench op measured by a run, from its program name (all_reduce_perf, ..._mpi)."""
    name = re.sub(r"_perf(_\w+)?$", "", run.program or "")
    if name not in OPS:
        raise NcclTestsFormatError(
            f"{run.where}: {run.program} has no commbench counterpart; commbench imports "
            f"{', '.join(k + '_perf' for k in OPS)}.")
    return OPS[name]


def variant_of(run: TestRun, op: str, line: ResultLine) -> str:
    """`default`, or the nccl-tests settings that make the point differ from commbench's."""
    tags = []
    if COLLECTIVE_OPS[op].rooted and line.root != ROOT:
        tags.append(f"root={line.root}")       # commbench's rooted ops use root 0 (ops.ROOT)
    if run.agg_iters > 1:
        tags.append(f"agg_iters={run.agg_iters}")
    if run.blocking:
        tags.append("blocking")
    return ",".join(tags) or "default"   # -u, -R, -a and alltoallv's traffic are parameters (settings_of)


def geometry(run: TestRun) -> tuple[int, int, int]:
    """(world_size, num_nodes, ranks_per_node) from the rank lines."""
    hosts: dict[str, int] = {}
    per_device = run.world_size // max(1, len(run.devices))   # JSON lists one device per process
    for d in run.devices:
        hosts[d.host] = hosts.get(d.host, 0) + per_device
    return run.world_size, len(hosts), max(hosts.values())


def _check_op_columns(op: str, line: ResultLine, program: str | None) -> None:
    """redop and root as nccl-tests prints them for ``op``: rows of another op under this header
    (a pasted table) are refused, not attributed to the wrong op."""
    spec = COLLECTIVE_OPS[op]
    why = None
    if spec.reduces and line.redop == "none":
        why = f"{op} reduces, so nccl-tests prints its reduction (sum, max ...), not 'none'"
    elif op in NO_REDOP and line.redop != "none":
        why = f"nccl-tests prints redop 'none' for {op}, not {line.redop!r}"
    elif spec.rooted and line.root < 0:
        why = f"{op} has a root, so nccl-tests prints it (>= 0), not {line.root}"
    elif not spec.rooted and line.root != -1:
        why = f"{op} has no root, so nccl-tests prints -1, not {line.root}"
    if why:
        raise NcclTestsFormatError(
            f"{line.where}: this row (redop {line.redop!r}, root {line.root}) is not a row of {program}: {why}. "
            f"Rows of another op under this header (a pasted or mixed-up log) cannot be imported.")


def one_rank_note(op: str, side: Side, n: int) -> str | None:
    """Why a bandwidth of a 1-rank point means nothing (None when it does): in place nothing
    moves, so the time is the launch cost and the bandwidth a timer artefact; out of place the
    bus factor (n-1)/n of the all-to-all ops is 0."""
    if n != 1:
        return None
    if side.in_place:
        return (f"1 rank in place: {op} moves no data, so {side.time_us:g} us is the launch cost and "
                f"algbw/busbw would be a timer artefact; they are left empty")
    if metrics.bus_factor(op, 1) == 0:
        return f"1 rank: busbw of {op} is 0 by nccl-tests' factor (n-1)/n; it is left empty (algbw is the copy rate)"
    return None


def _check_size(op: str, line: ResultLine, elem: int, n: int, dtype: str) -> None:
    if op == "alltoallv":   # size: the busiest rank's larger side; count: per peer (0 for a matrix)
        if line.size_bytes % elem:
            raise NcclTestsFormatError(f"{line.where}: size {line.size_bytes} B is not whole {dtype} elements")
        return
    expected = line.count * elem * (n if COLLECTIVE_OPS[op].chunked else 1)
    if line.size_bytes != expected:
        raise NcclTestsFormatError(
            f"{line.where}: size {line.size_bytes} B and count {line.count} disagree for {op} of "
            f"{dtype} on {n} rank(s) (expected {expected} B): the rank lines, the op or the row are wrong.")


def recompute(op: str, side: Side, count: int, elem: int, n: int, where: str,
              size_bytes: int = 0) -> tuple[float | None, float | None]:
    """algbw and busbw from commbench's formulas; the file's must agree to their printed digits.
    alltoallv: algbw is ``size_bytes`` (the busiest rank's larger side, as both tools define it)."""
    if side.time_us <= 0:
        return None, None
    moved = size_bytes if op == "alltoallv" else metrics.algbw_bytes(op, count, elem, n)
    algbw = metrics.gbps(moved, side.time_us)
    busbw = algbw * metrics.bus_factor(op, n)
    rel_time = side.time_half_unit / side.time_us
    for name, ours, theirs, half in (("algbw", algbw, side.algbw_gbps, side.algbw_half_unit),
                                     ("busbw", busbw, side.busbw_gbps, side.busbw_half_unit)):
        tol = BW_SLACK * (half + abs(ours) * rel_time / (1 - rel_time) if rel_time < 1 else float("inf"))
        if abs(ours - theirs) > tol + 1e-12:
            label = "in-place" if side.in_place else "out-of-place"
            raise NcclTestsFormatError(
                f"{where}: {label} {name} is {theirs:g} GB/s in the file but {ours:.4g} GB/s by "
                f"commbench's formula for {op} on {n} rank(s) ({count} elements of {elem} B in "
                f"{side.time_us:g} us): the file's numbers, rank lines or op do not belong together.")
    return algbw, busbw


def status_of(op: str, side: Side, count: int) -> tuple[str, str]:
    """(status, reason) of one side of a result line."""
    if side.wrong is None:
        if side.in_place and no_in_place_reason(op):   # nccl-tests prints N/A for these in place
            return "skipped", (f"nccl-tests does not check in-place {op} (#wrong N/A); commbench has no "
                               f"in-place {op} (send and receive buffers must differ)")
        return "failed", "not checked: nccl-tests printed #wrong N/A (data check off, -c 0)"
    if side.wrong > 0:
        return "wrong", f"{side.wrong} element(s) differ from the expected values (nccl-tests #wrong)"
    if count == 0:
        return "skipped", ("0 elements per rank: nccl-tests rounds each rank's part down to a "
                           "multiple of 16 bytes")
    return "ok", ""


def rows_of(run: TestRun, *, suite: str, bench: str, log: str) -> tuple[list[dict], list[dict]]:
    """Result rows and per-iteration samples of one nccl-tests invocation."""
    from commbench.families import get_family
    from commbench.families.base import Case
    from commbench.runfolder import case_row

    # Every collectives parameter at its default, in the family's order, as a suite that sets
    # only in_place expands them: the case ids then match `commbench run`'s.
    defaults = {name: p.default for name, p in get_family("collectives").params.items()}
    op = op_of(run)
    n, num_nodes, rpn = geometry(run)
    timing = "graph" if run.graph_launches > 0 else "pipelined"
    rows, samples = [], []
    for line in run.lines:
        if line.type_name not in DTYPES:
            raise NcclTestsFormatError(f"{line.where}: unknown nccl-tests data type {line.type_name!r} "
                                       f"(known: {', '.join(DTYPES)})")
        dtype = DTYPES[line.type_name]
        elem = dtypes.size_bytes(dtype)
        _check_op_columns(op, line, run.program)
        _check_size(op, line, elem, n, dtype)
        reduce_op = line.redop if COLLECTIVE_OPS[op].reduces else ""
        settings, registered = settings_of(run, op, elem, line)
        for side in line.sides:
            algbw, busbw = recompute(op, side, line.count, elem, n, line.where, line.size_bytes)
            case = Case(suite=suite, bench=bench, family="collectives", op=op, backend="nccl",
                        variant=variant_of(run, op, line), env=(), dtype=dtype, size_bytes=line.size_bytes,
                        params=tuple({**defaults, **settings, "in_place": side.in_place,
                                      "reduce_op": reduce_op or defaults["reduce_op"]}.items()),
                        warmup=run.warmup_iters, iters=run.iters, timing=timing, ranks=n,
                        ranks_per_node=rpn, timeout_s=0.0)
            row = case_row(case, world_size=n, num_nodes=num_nodes, ranks_per_node=rpn, log=log)
            status, reason = status_of(op, side, line.size_bytes // elem if op == "alltoallv" else line.count)
            note = one_rank_note(op, side, n)
            if note:   # kept as a measured time, but no bandwidth that could headline a report
                busbw = None
                algbw = None if side.in_place else algbw
                reason = reason or note
            row.update(count=line.count, time_us=side.time_us, algbw_gbps=algbw, busbw_gbps=busbw,
                       wrong=side.wrong, status=status, reason=reason, reduce_op=reduce_op,
                       registered=registered, source=SOURCE, source_line=short_where(line.where, run))
            side_samples = _samples(case.case_id, side, run)
            if side_samples:
                stats = metrics.summarize(reduced_times(side_samples, settings["rank_time"]))
                row.update({k: stats[k] for k in ("time_us_min", "time_us_p90", "time_us_p99", "time_us_max")})
            elif side.iter_min_us is not None:
                row.update(time_us_min=side.iter_min_us, time_us_p99=side.iter_p99_us, time_us_max=side.iter_max_us)
            rows.append(row)
            samples += side_samples
    return rows, samples


def _samples(case_id: str, side: Side, run: TestRun) -> list[dict]:
    """-I per-iteration times (JSON only): one row per process (its slowest GPU) per iteration."""
    if side.per_process_times_us:
        rows = side.per_process_times_us
    elif side.iter_times_us:
        rows = [side.iter_times_us]
    else:
        return []
    out = []
    for proc, times in enumerate(rows):
        dev = run.devices[min(proc, len(run.devices) - 1)]
        out += [{"case_id": case_id, "rank": proc, "host": dev.host, "gpu": f"cuda:{dev.device}",
                 "iteration": i, "time_us": t} for i, t in enumerate(times)]
    return out


def short_where(where: str, run: TestRun) -> str:
    return where.replace(str(run.path), run.path.name, 1)
