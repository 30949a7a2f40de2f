"""Typed errors with messages a user can act on."""


class CommbenchError(Exception):
    """Base class: the CLI prints the message (no traceback) and exits with ``exit_code``."""

    exit_code = 2   # bad input (DESIGN section 6)


class SuiteError(CommbenchError):
    """A suite file is malformed: the message names file, line and field."""


class SkipCase(CommbenchError):
    """Raised by a family's setup when a Case cannot run here (row: skipped)."""


class LaunchError(CommbenchError):
    """No launcher could start the ranks (no mpiexec/srun, bad settings)."""


class RunFolderError(CommbenchError):
    """A path is not a readable run folder (no results.csv, unreadable CSV or JSON)."""


class StorageFull(CommbenchError):
    """The run folder's disk (or quota) is full: the run stops, what was stored stays consistent."""

    exit_code = 1   # not bad input: the run failed


def preview(value, limit: int = 60, *, quote: bool = True) -> str:
    """A short, bounded rendering of a value for an error message: repr (or str when
    ``quote`` is False) cut to about ``limit`` characters. Containers are rendered only as far as
    the budget goes, so a huge value costs no more than a small one."""
    out: list[str] = []
    budget = [limit + 1]

    def emit(text: str) -> bool:
        out.append(text[: budget[0]])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(v, depth: int) -> bool:
        if isinstance(v, dict):
            if not emit("{"):
                return False
            for i, (k, x) in enumerate(v.items()):
                if (i and not emit(", ")) or not walk(k, depth + 1) or not emit(": ") or not walk(x, depth + 1):
                    return False
            return emit("}")
        if isinstance(v, (list, tuple, set, frozenset)):
            if not emit("["):
                return False
            for i, x in enumerate(v):
                if (i and not emit(", ")) or not walk(x, depth + 1):
                    return False
            return emit("]")
        try:
            text = v if isinstance(v, str) and not (quote or depth) else repr(v)
        except ValueError:   # an int past Python's digit limit for str()
            text = f"<a {v.bit_length()}-bit number>" if isinstance(v, int) else f"<{type(v).__name__}>"
        if len(text) > budget[0] + 3:
            text = text[: budget[0] + 3]
        return emit(text)

    complete = walk(value, 0)
    text = "".join(out)
    return text if complete and len(text) <= limit else text[:limit] + "..."
