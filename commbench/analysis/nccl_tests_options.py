"""nccl-tests' command-line options in one table: the short and long spelling of each option that
commbench reads (`commbench import` of a -J file's command line) or takes (`commbench nccl`), and
how nccl-tests numbers the choices of -R and -a. Nothing else spells these names."""
from __future__ import annotations

from dataclasses import dataclass

from .. import metrics


@dataclass(frozen=True)
class Option:
    short: str   # -b
    long: str    # --minbytes


OPTIONS = {
    "min_bytes": Option("b", "minbytes"), "max_bytes": Option("e", "maxbytes"),
    "step_factor": Option("f", "stepfactor"), "step_bytes": Option("i", "stepbytes"),
    "iters": Option("n", "iters"), "warmup": Option("w", "warmup_iters"), "ngpus": Option("g", "ngpus"),
    "dtype": Option("d", "datatype"), "redop": Option("o", "op"), "check": Option("c", "check"),
    "graph": Option("G", "cudagraph"), "register": Option("R", "local_register"),
    "unalign": Option("u", "unalign"), "average": Option("a", "average"),
}

# -R as nccl-tests numbers it -> the collectives' register parameter
REGISTER = {0: "none", 1: "user", 2: "window"}
# -a -> how the ranks' times reduce (rank_time). 4 (sum) is nccl-tests' own: an import reads it,
# commbench's collectives cannot time it (RANK_TIME_RUNNABLE)
RANK_TIME = {0: "rank0", 1: "avg", 2: "min", 3: "max", 4: "sum"}
RANK_TIME_RUNNABLE = {k: v for k, v in RANK_TIME.items() if v in metrics.RANK_TIMES}
DEFAULT_AVERAGE = 1   # nccl-tests' -a default: a table does not print -a, so a table import assumes it


def flag(name: str) -> str:
    """The option as a user types it in a message: ``-R`` (``--local_register``)."""
    return f"-{OPTIONS[name].short}"
