"""The run folder's schema (docs/results.md): the result columns every row has, the sample
columns, the statuses, which columns are numbers, and the row of a Case before it is measured."""
from __future__ import annotations

# Readers refuse a run folder whose run.json holds a newer schema_version (docs/results.md).
SCHEMA_VERSION = 1

COLUMNS = ["suite", "bench", "case_id", "family", "op", "backend", "variant", "dtype",
           "size_bytes", "count", "world_size", "num_nodes", "ranks_per_node", "in_place",
           "warmup", "iters", "timing", "time_us", "time_us_min", "time_us_p90", "time_us_max",
           "algbw_gbps", "busbw_gbps", "wrong", "status", "reason", "log"]
# Columns some families add, named in docs/results.md (an acceptance rule may name them: on a
# run without them it simply matches no rows).
FAMILY_COLUMNS = ["nccl_algo", "nccl_proto", "tokens_per_s", "transport", "ranks_per_gpu",
                  "bitwise_mismatch"]   # `check: bitwise` (measure/bitwise.py)
# Written for every row with per-iteration times since the 99th percentile was added; optional on
# reading (older run folders lack it).
TAIL_COLUMNS = ["time_us_p99"]
# The launch attempt that stored a row (0: the launch's first start, one more for each start after
# it: a start retry, a relaunch after a timeout or a crash; counted per launch within one `run`).
# Written with every row a launch stores; optional on reading (older run folders lack it).
ATTEMPT_COLUMN = "attempt"
# A burn-in (`run --duration`) stamps each row with its pass (1, 2, ...) and the pass's start time
# once the pass ends; an unstamped row of a burn-in folder belongs to the pass still running.
PASS_COLUMN, PASS_UTC_COLUMN = "pass", "pass_utc"
# The parameter columns of run folders whose run.json predates `param_columns` (every family
# parameter commbench had then): a reader takes those of them the rows hold, and never asks the
# families, so an old folder reads the same whatever families this commbench has.
LEGACY_PARAM_COLUMNS = (
    "allow_multicast", "num_ctas", "threads_per_cta", "peer_memory",                         # allreduce
    "in_place", "reduce_op", "timed_loop", "buffer_span_bytes",                              # collectives
    "victim_rank", "spin_ns_per_byte", "slow_pct",                                           # harness
    "gemm_m", "gemm_n", "gemm_k",                                                            # interference
    "hidden", "topk", "experts", "routing", "seed", "n_group", "topk_group", "zipf_s",       # moe
    "num_sms", "max_tokens", "model", "phase", "tokens", "intermediate", "overlap", "gemm",
    "threads", "scope", "nbi", "direction", "reps", "allow_limited_mpg",                     # nvshmem
    "executor", "proxy_threads", "warps_per_cta", "batch", "cmds_per_producer",              # proxy
    "chunk_bytes", "ring_slots", "ce_batch", "timeout_ms", "cpu_affinity", "inject_stall_after",
    "ffn", "heads", "kv_heads", "head_dim", "tokens_per_rank", "seq_len", "layers",           # training
    "reshard_after_forward", "prefetch", "replicate", "reduce_dtype", "bucket_params",
    "overlap_grad_reduce", "overlap_param_gather", "sequence_parallel", "cp_comm", "cp_a2a_size", "fault")
TIME_COLUMNS = ["time_us", "time_us_min", "time_us_p90", "time_us_p99", "time_us_max"]   # lower is better
SAMPLE_COLUMNS = ["case_id", "rank", "host", "gpu", "iteration", "time_us"]
STATUSES = ("ok", "skipped", "wrong", "failed", "timeout")   # every status a row may have, in summary order
FAILING = ("wrong", "failed", "timeout")   # statuses that make a run exit 1
# A measured point: the columns that say two rows measured the same thing (in two runs, or of two
# repeats). Readers use those of them a folder has. Parameters of a family are further columns.
POINT_KEY = ("family", "op", "backend", "variant", "dtype", "size_bytes", "world_size", "in_place", "timing")
# The same point measured by groups of hosts of one run (pairs, a search's groups, per-node launches):
# the benchmark names it, and the group's size is the placement's, not the point's.
PLACED_POINT_KEY = ("bench",) + tuple(k for k in POINT_KEY if k != "world_size")
# Columns a reader turns into numbers (an empty cell becomes NaN).
NUMERIC = ("pass", "attempt", "size_bytes", "count", "world_size", "num_nodes", "ranks_per_node", "ranks_per_gpu",
           "warmup", "iters",
           "time_us", "time_us_min", "time_us_p90", "time_us_p99", "time_us_max", "algbw_gbps", "busbw_gbps",
           "wrong", "bitwise_repeats", "bitwise_mismatch")
# Columns a reader turns into strings (an empty cell becomes "").
TEXT = ("status", "reason", "op", "backend", "variant", "dtype", "family")
FINAL_STATUSES = ("ok", "wrong", "skipped")   # a --resume does not rerun these Cases


def placement_columns(case) -> dict:
    """Row columns of a placed Case: `hosts` (comma-joined), and `host` when it ran on one host."""
    if not case.hosts:
        return {}
    return {"hosts": ",".join(case.hosts), **({"host": case.hosts[0]} if len(case.hosts) == 1 else {})}


def case_row(case, *, world_size: int, num_nodes: int | None, ranks_per_node: int, log: str,
             status: str = "ok", reason: str = "", attempt: int | None = None) -> dict:
    """A result row for ``case`` with every column of docs/results.md (measurements still empty);
    ``attempt``: the launch attempt the row settles (the `attempt` column), when there was one."""
    return {
        "suite": case.suite, "bench": case.bench, "case_id": case.case_id, "family": case.family,
        "op": case.op, "backend": case.backend, "variant": case.variant, "dtype": case.dtype,
        "size_bytes": case.size_bytes, "count": None, "world_size": world_size,
        "num_nodes": num_nodes, "ranks_per_node": ranks_per_node,
        "in_place": case.param("in_place"), "warmup": case.warmup, "iters": case.iters,
        "timing": case.timing, "time_us": None, "time_us_min": None, "time_us_p90": None,
        "time_us_max": None, "algbw_gbps": None, "busbw_gbps": None, "wrong": None,
        "status": status, "reason": reason, "log": log,
        **({ATTEMPT_COLUMN: attempt} if attempt is not None else {}),
        **placement_columns(case), **{k: v for k, v in case.params if k != "in_place"},
    }
