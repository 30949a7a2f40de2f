"""`commbench nccl` writes its options as a suite in a temporary folder and loads it: a problem
the suite loader finds is told in the options' terms (the flag that set the field), never as a
line of a file the user did not write (docs/quick.md)."""
from __future__ import annotations

import re

from ..analysis.nccl_tests_options import flag
from ..errors import CommbenchError

# the suite field a `commbench nccl` option sets (analysis/quick.py suite_dict) -> the option
FIELD_FLAGS = {
    "sizes": f"{flag('min_bytes')}/{flag('max_bytes')}/{flag('step_factor')}/{flag('step_bytes')}",
    "ranks": flag("ngpus"), "ranks_per_node": flag("ngpus"), "iters": flag("iters"), "warmup": flag("warmup"),
    "dtypes": flag("dtype"), "timing": flag("graph"), "backends": "--backend", "ops": "OP",
    "params.register": flag("register"), "params.offset_bytes": flag("unalign"),
    "params.rank_time": flag("average"), "params.reduce_op": flag("redop"), "params.in_place": "OP",
}
# "PATH:LINE: benchmarks[0] (name).FIELD: message" or "PATH:LINE: benchmarks[0].FIELD: message"
_PROBLEM = re.compile(r"^(\s*)\S.*?:\d+: benchmarks\[\d+\](?: \([^)]*\))?(?:\.(?P<field>[\w.]+))?: (?P<msg>.*)$")


def in_flag_terms(exc: CommbenchError, suite_path) -> CommbenchError:
    """``exc`` with every mention of the temporary suite file told as the option that caused it."""
    text = str(exc)
    path = str(suite_path)
    if path not in text:
        return exc
    lines = []
    for line in text.splitlines():
        m = _PROBLEM.match(line) if path in line else None
        if m:
            field = m.group("field") or ""
            option = FIELD_FLAGS.get(field) or FIELD_FLAGS.get(field.split(".")[0], "the options")
            msg = m.group("msg").replace("; pass --max-ranks N to start more", "").replace(" (limit --max-cases)", "")
            lines.append(f"{m.group(1)}{option}: {msg}")   # (commbench nccl has neither limit's flag)
        elif line.startswith(f"{path}: invalid suite"):
            lines.append("commbench nccl: bad options" + line[len(f"{path}: invalid suite"):])
        else:
            lines.append(line.replace(path, "the options"))
    exc.args = ("\n".join(lines),)
    return exc
