"""Typed errors with messages a user can act on."""


class CommbenchError(Exception):
    """Base class: the CLI prints the message (no traceback) and exits 2."""


class SuiteError(CommbenchError):
    """A suite file is malformed: the message names file, line and field."""


class SkipCase(CommbenchError):
    """Raised by a family's setup when a Case cannot run here (row: skipped)."""


class LaunchError(CommbenchError):
    """No launcher could start the ranks (no mpiexec/srun, bad settings)."""
