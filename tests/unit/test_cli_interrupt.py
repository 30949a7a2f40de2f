"""Ctrl-C before a run installs its own handler (start-up, or a command without one) exits 130, as
the README's exit table says, never click's "Aborted!" with 1."""
from __future__ import annotations

from click.testing import CliRunner

from commbench.cli import cli


def test_an_interrupt_during_a_command_exits_130(monkeypatch):
    import commbench.commands.options as options

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(options, "load", interrupted)
    monkeypatch.setattr("commbench.cli.load", interrupted)
    res = CliRunner().invoke(cli, ["validate", "suites/quickstart.yaml"])
    assert res.exit_code == 130 and "interrupted" in res.output and "Aborted" not in res.output
