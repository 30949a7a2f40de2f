"""`commbench accept TARGET`: pass/fail a run folder against rules, or run an acceptance suite first
(as one Run, with `--set`/`--only` as `run` has them) and then judge it. Exit 0 every check passed,
1 a check failed, 2 bad input; with --junit the JUnit file always says which."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from ..analysis.outputs import check_writable, twin_paths, write_both, write_text_whole
from ..errors import CommbenchError
from .options import load, overrides_of, price_options, share_gpu_option, suite_options


@click.command("accept")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--rules", "rules_path", type=click.Path(path_type=Path), default=None,
              help="Rules YAML. Default: the 'rules:' of the acceptance suite itself "
                   "(for a run folder: its suite.yaml copy).")
@click.option("--baseline", type=click.Path(path_type=Path), default=None,
              help="Run folder that within_pct_of rules compare against.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None,
              help="Write JUnit XML (one testcase per check) for CI systems.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, allow_dash=True), default=None,
              help="Write the verdicts as JSON (every check, node and link, the counts and the exit status; "
                   "schema: docs/accept.md) to this file ('-': standard output; the table then goes to "
                   "standard error).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML verdict report (Markdown twin next to it). Default: RUN/accept.html.")
@click.option("--localize/--no-localize", default=None,
              help="Name slow hosts/GPUs from per-rank samples (default: as the rules file says).")
@click.option("--dry-run", is_flag=True, help="print the suite's schedule of waves (priced with "
                                              "--launch-cost or --estimate-from); run nothing")
@price_options
@suite_options
@share_gpu_option
def accept_cmd(target: Path, rules_path: Path | None, baseline: Path | None, junit_path: Path | None,
               out: Path | None, localize: bool | None, dry_run: bool, launch_cost: str | None,
               estimate_from: Path | None, sets: tuple[str, ...], only: tuple[str, ...],
               max_cases: int | None, max_ranks: int | None, share_gpu: bool = False,
               json_path: Path | None = None) -> None:
    """Pass/fail a run folder (or run an acceptance suite first) against rules.

    Exit status: 0 every check passed, 1 a check failed, 2 bad input (or a suite that cannot run
    here; with --junit, the JUnit file then holds one testcase in error saying why).
    """
    from ..analysis.accept.junit import junit_error_xml, write_junit
    from ..analysis.accept.verdict_json import error_json
    from ..launch.preflight import PreflightFailed
    from ..runfolder import is_run_folder

    is_suite = not is_run_folder(target)
    if (sets or only or max_cases or max_ranks or share_gpu) and not is_suite:
        raise click.UsageError("--set, --only, --max-cases, --max-ranks and --share-gpu apply to a suite to run, "
                               f"not to the run folder {target}")
    if dry_run or launch_cost or estimate_from:
        _dry_run(target, dry_run, launch_cost, estimate_from, overrides_of(sets, only), max_cases, max_ranks)
        return
    if junit_path is not None:
        check_writable(junit_path, "--junit")
    if json_path is not None and str(json_path) != "-":
        check_writable(json_path, "--json")
    try:
        ruleset = _ruleset(target, rules_path, localize)
        if out is not None:
            check_writable(twin_paths(out)[0], "--out")
        base_run = _load_run(baseline) if baseline is not None else None
        run_dir = (_run_suite(target, overrides_of(sets, only), max_cases, max_ranks, share_gpu) if is_suite
                   else target)
        code = _judge(run_dir, ruleset, base_run, out, junit_path, json_path)
    except PreflightFailed as exc:   # the node is not the suite's shape: a failed verdict, nothing ran
        if junit_path is not None:
            from ..analysis.accept.preflight_junit import preflight_junit_xml

            write_junit(junit_path, preflight_junit_xml(exc.preflight, Path(target).stem))
            click.echo(f"wrote {junit_path}", err=True)
        _write_json(json_path, error_json(target, str(exc), 1))
        click.echo(f"FAIL: {exc}", err=True)
        sys.exit(1)
    except CommbenchError as exc:
        if junit_path is not None:   # CI gets a report that says why, not a missing file
            write_junit(junit_path, junit_error_xml(Path(target).stem, str(exc)))
            click.echo(f"wrote {junit_path} (one error: the acceptance could not be judged)", err=True)
        _write_json(json_path, error_json(target, str(exc), getattr(exc, "exit_code", 2)))
        raise
    sys.exit(code)


def _dry_run(target: Path, dry_run: bool, launch_cost, estimate_from, overrides: dict, max_cases, max_ranks):
    from .run_cmd import print_schedule

    if not dry_run:
        raise click.UsageError("--launch-cost and --estimate-from price a --dry-run")
    if not str(target).endswith((".yaml", ".yml")):
        raise CommbenchError(f"--dry-run prices a suite to run; {target} is not a suite file")
    suite = load(target, overrides, max_cases, max_ranks)
    click.echo(f"{suite.name}: {len(suite.cases)} Cases in {len(suite.launches)} launches")
    print_schedule(suite, launch_cost, estimate_from)


def _load_run(path: Path):
    from ..runfolder.reader import load_run

    return load_run(path)


def suite_has_rules(path: Path) -> bool:
    """A quick look for a 'rules' key (load_rules then reads the file properly and says what is
    wrong with it); any bytes, however unreadable, give an answer, never an exception."""
    try:
        if not path.is_file():
            return False
        if path.stat().st_size > 16 * 1024 * 1024:
            return True   # too large to be a suite: load_rules says so
        return b"rules" in path.read_bytes()
    except OSError:
        return False


def _ruleset(target: Path, rules_path: Path | None, localize: bool | None):
    """The rules, validated before any time is spent on a run."""
    from ..analysis.accept.rules import LocalizeSettings, load_rules
    from ..runfolder import is_run_folder

    if rules_path is None:
        own = target / "suite.yaml" if is_run_folder(target) else target
        if not suite_has_rules(own):
            raise CommbenchError(f"no rules for {target}: pass --rules FILE, or use an acceptance "
                                 "suite with a top-level 'rules:' list.")
        rules_path = own
    ruleset = load_rules(rules_path)
    if localize is True and ruleset.localize is None:
        return replace(ruleset, localize=LocalizeSettings())
    if localize is False:
        return replace(ruleset, localize=None)
    return ruleset


def _run_suite(target: Path, overrides: dict, max_cases, max_ranks, share_gpu: bool = False) -> Path:
    """Run the acceptance suite ``target`` as one Run; its folder."""
    if not (target.is_file() and target.suffix in (".yaml", ".yml")):
        raise CommbenchError(f"{target} is neither a run folder (with results.csv) nor a suite "
                             "YAML file.")
    from .start import execute, stopping_cleanly

    suite = load(target, overrides, max_cases, max_ranks)
    with stopping_cleanly(resume_hint=""):
        return execute(suite, None, overrides=overrides, accept=True, share_gpu=share_gpu)


def _judge(run_dir: Path, ruleset, base_run, out: Path | None, junit_path: Path | None,
           json_path: Path | None = None) -> int:
    """Evaluate the rules on the stored run; print the table, write the report (and JUnit)."""
    from ..analysis.accept.junit import junit_xml, write_junit
    from ..analysis.accept.verdict import accept_document, evaluate, machine_warnings, verdict_table
    from ..analysis.accept.verdict_json import verdict_json
    from ..analysis.text_table import terminal_width, text_table

    run = _load_run(run_dir)
    verdicts, findings = evaluate(run, ruleset, base_run)
    warnings = machine_warnings(run, base_run)
    err = json_path is not None and str(json_path) == "-"   # stdout holds the JSON
    click.echo(text_table(verdict_table(verdicts), wrap="reason", width=terminal_width()), err=err)
    html_path, md_path = write_both(accept_document(run, ruleset, verdicts, findings, warnings),
                                    out or run_dir / "accept.html")
    click.echo(f"wrote {html_path} and {md_path}", err=err)
    if junit_path is not None:
        write_junit(junit_path, junit_xml(verdicts, ruleset.path.stem, warnings))
        click.echo(f"wrote {junit_path}", err=err)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    failed = sum(not v.passed for v in verdicts)
    _write_json(json_path, verdict_json(run, ruleset, verdicts, findings, warnings, 1 if failed else 0, base_run))
    click.echo(f"{'FAIL' if failed else 'PASS'}: {failed} of {len(verdicts)} checks failed"
               + ("; the machine was busy (warning above): times may be slow or noisy" if warnings else ""), err=err)
    return 1 if failed else 0


def _write_json(path: Path | None, data: dict) -> None:
    """``accept --json``: strict JSON (schema: docs/accept.md, "Verdicts as JSON")."""
    if path is None:
        return
    import json

    text = json.dumps(data, indent=1, allow_nan=False)
    if str(path) == "-":
        click.echo(text)
        return
    write_text_whole(path, text + "\n", "--json")   # whole or not at all, as --junit
    click.echo(f"wrote {path}", err=True)
