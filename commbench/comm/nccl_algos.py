"""Which NCCL algorithm and protocol can run which collective, so a Case whose ``NCCL_ALGO`` /
``NCCL_PROTO`` leave NCCL nothing to run is skipped with the reason before launching, instead of
failing with NCCL's "invalid usage" (docs/families/collectives.md, "Forced algorithms").

The table is NCCL's own (2.23 to 2.28: the kernels src/device/generate.py builds, and the
eligibility rules of src/graph/tuning.cc and src/enqueue.cc):

- all_reduce: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree (no PAT);
- all_gather, reduce_scatter: Ring, CollNetDirect, NVLS, PAT;
- broadcast, reduce: Ring only;
- alltoall, alltoallv, sendrecv, gather, scatter are point-to-point: no algorithm, NCCL_ALGO
  does not apply.

Protocols: LL and LL128 exist for Ring and Tree only; PAT, NVLS, NVLSTree and CollNet run Simple.
What the machine decides: PAT runs only with one rank per node (NCCL counts nodes by host: ranks
sharing a GPU each claim a host of their own, so they qualify; ``NCCL_PAT_ENABLE=1`` forces it
on, ``0`` off); CollNet needs ``NCCL_COLLNET_ENABLE=1`` and a CollNet network plugin (SHARP);
NVLS needs multicast, which commbench holds off unless a Case opts in (docs/design.md,
"Multicast safety"), and reduces only int32/int64/float16/bfloat16 (sum, min, max) and
float32/float64 (sum). A communicator of one rank runs no algorithm at all (NCCL copies locally),
so nothing here applies to it.
"""
from __future__ import annotations

import os
from typing import Mapping

from ..sysinfo.nccl_log import ALGOS, algo_spec_for, requested_algos

# op -> (NCCL function name as NCCL_ALGO's per-function form spells it, the algorithms it has)
NCCL_ALGOS_OF_OP: dict[str, tuple[str, frozenset[str]]] = {
    "all_reduce": ("AllReduce", frozenset({"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"})),
    "all_gather": ("AllGather", frozenset({"Ring", "CollNetDirect", "NVLS", "PAT"})),
    "reduce_scatter": ("ReduceScatter", frozenset({"Ring", "CollNetDirect", "NVLS", "PAT"})),
    "broadcast": ("Broadcast", frozenset({"Ring"})),
    "reduce": ("Reduce", frozenset({"Ring"})),
}
PROTOS = ("LL", "LL128", "Simple")
LOW_LATENCY_ALGOS = frozenset({"Ring", "Tree"})   # the only ones with LL and LL128 kernels
COLLNET = frozenset({"CollNetDirect", "CollNetChain"})
NVLS = frozenset({"NVLS", "NVLSTree"})
# NVLS reductions NCCL builds (src/device/generate.py): dtype -> reduce ops
NVLS_REDUCTIONS = {"int32": ("sum", "min", "max"), "int64": ("sum", "min", "max"),
                   "float16": ("sum", "min", "max"), "bfloat16": ("sum", "min", "max"),
                   "float32": ("sum",), "float64": ("sum",)}
REDUCING_OPS = ("all_reduce", "reduce_scatter", "reduce")
ORDER = {a: i for i, a in enumerate(ALGOS)}


def requested_protos(value: str | None, func: str) -> frozenset[str] | None:
    """Protocols an ``NCCL_PROTO`` value allows for ``func`` (``LL,Simple``, ``^LL128``, the
    per-function form); None when it does not restrict."""
    spec = algo_spec_for(value, func)
    if spec is None:
        return None
    canon = {p.lower(): p for p in PROTOS}
    names = {canon.get(x.strip().lower(), x.strip()) for x in spec.lstrip("^").split(",") if x.strip()}
    return frozenset(set(PROTOS) - names) if spec.startswith("^") else frozenset(names)


def _names(algos) -> str:
    return ", ".join(sorted(algos, key=lambda a: ORDER.get(a, 99)))


def _forced(env: Mapping[str, str], key: str) -> str:
    return f"{key}={env[key]}" if env.get(key) else ""


def op_algo_refusal(op: str, env: Mapping[str, str]) -> str | None:
    """Why NCCL can run none of the algorithms and protocols ``env`` allows for ``op``, from the
    table alone (whatever the machine); None when one remains or nothing is forced."""
    if op not in NCCL_ALGOS_OF_OP:
        return None
    func, has = NCCL_ALGOS_OF_OP[op]
    allowed = requested_algos(env.get("NCCL_ALGO"), func)
    algos = has if allowed is None else has & allowed
    if not algos:
        spec = algo_spec_for(env.get("NCCL_ALGO"), func) or ""
        what = f"NCCL has no {_names(allowed)} {op}; " if allowed and not spec.startswith("^") else ""
        return f"{_forced(env, 'NCCL_ALGO')} leaves {op} no algorithm ({what}{op} runs {_names(has)})"
    protos = requested_protos(env.get("NCCL_PROTO"), func)
    if protos is not None and "Simple" not in protos:
        if not algos & LOW_LATENCY_ALGOS:
            return (f"{_forced(env, 'NCCL_ALGO')} with {_forced(env, 'NCCL_PROTO')}: {_names(algos)} "
                    f"run{'s' if len(algos) == 1 else ''} only NCCL's Simple protocol (LL and LL128 are "
                    f"Ring's and Tree's)")
        if not protos & {"LL", "LL128"}:
            return f"{_forced(env, 'NCCL_PROTO')} names no protocol NCCL has (LL, LL128, Simple)"
    return None


def machine_algos(op: str, env: Mapping[str, str], *, ranks_per_node: int, ranks_share_gpus: bool,
                  multicast: bool, dtype: str = "", reduce_op: str = "sum") -> frozenset[str]:
    """The algorithms of ``op`` that ``env`` allows and this launch can have (see the module's
    docstring for what the machine decides)."""
    func, has = NCCL_ALGOS_OF_OP[op]
    allowed = requested_algos(env.get("NCCL_ALGO"), func)
    algos = set(has if allowed is None else has & allowed)
    protos = requested_protos(env.get("NCCL_PROTO"), func)
    if protos is not None and "Simple" not in protos:
        algos &= LOW_LATENCY_ALGOS
    pat = str(env.get("NCCL_PAT_ENABLE", "2")).strip()
    if pat == "0" or (pat != "1" and ranks_per_node > 1 and not ranks_share_gpus):
        algos.discard("PAT")
    if str(env.get("NCCL_COLLNET_ENABLE", "0")).strip() != "1":
        algos -= COLLNET
    if not multicast or (op in REDUCING_OPS and reduce_op not in NVLS_REDUCTIONS.get(dtype, ())):
        algos -= NVLS
    return frozenset(algos)


def nccl_algo_refusal(op: str, env: Mapping[str, str], *, ranks: int, ranks_per_node: int,
                      ranks_share_gpus: bool, multicast: bool, dtype: str = "",
                      reduce_op: str = "sum") -> str | None:
    """Why a Case of ``op`` with this environment (the ranks', the Case's variant over it) cannot
    run on NCCL, or None. ``multicast``: whether the launch may use NVLS at all (False unless the
    Case opted in and no kill switch holds it off)."""
    if ranks <= 1 or op not in NCCL_ALGOS_OF_OP:
        return None
    table = op_algo_refusal(op, env)
    if table or not (env.get("NCCL_ALGO") or env.get("NCCL_PROTO")):
        return table
    func, has = NCCL_ALGOS_OF_OP[op]
    allowed = requested_algos(env.get("NCCL_ALGO"), func)
    wanted = has if allowed is None else has & allowed
    left = machine_algos(op, env, ranks_per_node=ranks_per_node, ranks_share_gpus=ranks_share_gpus,
                         multicast=multicast, dtype=dtype, reduce_op=reduce_op)
    if left:
        return None
    why = []
    if "PAT" in wanted:
        why.append(f"PAT runs with one rank per node only (this launch has {ranks_per_node}; "
                   "NCCL_PAT_ENABLE=1 forces it)")
    if wanted & COLLNET:
        why.append("CollNet needs NCCL_COLLNET_ENABLE=1 and a CollNet network plugin (SHARP)")
    if wanted & NVLS:
        why.append("NVLS needs NVLink multicast, held off here" if not multicast else
                   f"NVLS does not reduce {dtype} with {reduce_op}")
    forced = ", ".join(x for x in (_forced(env, "NCCL_ALGO"), _forced(env, "NCCL_PROTO")) if x)
    return f"{forced}: no {op} algorithm can run here: {'; '.join(why) or 'NCCL has none left'}"


def case_refusal(op: str, case_env, *, ranks: int, ranks_per_node: int, multicast: bool, dtype: str = "",
                 reduce_op: str = "sum", environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`nccl_algo_refusal` for a Case: its env over the environment its ranks inherit
    (``environ``, default this process's); whether its ranks share GPUs is read (once, cheaply)
    only when NCCL_ALGO or NCCL_PROTO is forced. A node whose GPUs cannot be counted counts as
    sharing, so PAT is never refused on a guess."""
    env = {**(os.environ if environ is None else environ), **dict(case_env)}
    if ranks <= 1 or not (env.get("NCCL_ALGO") or env.get("NCCL_PROTO")):
        return None
    from ..sysinfo.gpus import gpu_count

    gpus = gpu_count()
    return nccl_algo_refusal(op, env, ranks=ranks, ranks_per_node=ranks_per_node,
                             ranks_share_gpus=gpus == 0 or ranks_per_node > gpus, multicast=multicast,
                             dtype=dtype, reduce_op=reduce_op)
