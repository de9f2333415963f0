"""``envdoctor check`` and ``envdoctor fix``: the check graph on each host, then its safe remedies."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.checks.remote_code import scan_names_not_installed
from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import checking_options, output_options
from envdoctor.cli.output import ProgressLine, emit, wants_color
from envdoctor.cli.selection import Selection, select_hosts
from envdoctor.engine.graph import RemedySettings
from envdoctor.errors import UsageError
from envdoctor.operations.fleet import check_here, run_fleet
from envdoctor.report import render


def run_and_report(selection: Selection, *, command: str, fmt: str, output: str | None,
                   fix: bool = False, dry_run: bool = False) -> None:
    """Run the graph on the selected hosts (fixing with ``fix``), print the report, exit with its status."""
    same = selection.same_hosts
    with ProgressLine(len(selection.specs)) as progress:
        if command == "check" and all(spec.ssh is None for spec in selection.specs):
            # This machine only: one probe command, no event loop (asyncio is a third of start-up).
            report = check_here(selection.specs, selection.graph, selection.settings, progress=progress, same=same)
        else:
            import asyncio  # (only for SSH hosts or fix: a third of start-up)

            report = asyncio.run(run_fleet(selection.specs, selection.graph, selection.settings,
                                           command=command, fix=fix, dry_run=dry_run, progress=progress, same=same))
    if selection.same_groups:
        from envdoctor.operations.compare import add_same_results  # (only for a same = true group)

        add_same_results(report, selection.same_groups)
    if unknown := scan_names_not_installed(h.results for h in report.hosts):
        raise UsageError(f"--scan {', '.join(unknown)}: not installed on any host checked",
                         hint="name an installed distribution (`<venv>/bin/python -m pip list` shows them)")
    bad = sum(1 for h in report.hosts if not h.ok)
    text = render(report, fmt, color=wants_color(fmt, output), config=selection.config)
    emit(text, output, f"{bad} host(s) with problems" if bad else "all OK")
    sys.exit(report.exit_status)


@click.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@checking_options
@output_options()
@handle_errors
def check(hosts: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Run the check graph on each HOST and report what is wrong, why, and the fix.

    A group marked `same = true` in envdoctor.toml runs one job: its hosts are also compared
    as `envdoctor diff` compares them, and each gets a fleet.same result.

    \b
    Examples:
      envdoctor check
      envdoctor check ct200 b300 --venv /root/venv_sglang211 --require tiktoken
      envdoctor check gpu-fleet --format junit --output preflight.xml
    """
    run_and_report(select_hosts(hosts, **opts), command="check", fmt=fmt, output=output)


@click.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@checking_options
@click.option("--dry-run", is_flag=True, help="Show the commands (and diffs) that would run; change nothing.")
@click.option("--index-url", metavar="URL", help="Passed to pip for installs (hosts without internet).")
@click.option("--extra-index-url", "extra_index_urls", multiple=True, metavar="URL", help="Passed to pip (repeatable).")
@click.option("--find-links", "find_links", multiple=True, metavar="DIR|URL", help="Passed to pip (repeatable).")
@output_options()
@handle_errors
def fix(hosts: tuple[str, ...], dry_run: bool, index_url: str | None, extra_index_urls: tuple[str, ...],
        find_links: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Apply the safe remedies of failing checks on each HOST, then check again.

    Installs always use the venv's absolute interpreter (`<venv>/bin/python -m pip`), and
    only into an interpreter you chose (--venv, venv in envdoctor.toml, or locally the active
    $VIRTUAL_ENV). Each runs only when the venv's own pip shows a plan (pip install --dry-run
    --report) that breaks no installed package; otherwise the plan and who breaks are shown.
    Packages a model's own code imports are installed only with --trust-remote-code.
    Remedies marked 'by hand' (downgrades, creating a venv) are shown, never run.
    A second fix on a healthy host does nothing.
    """
    remedies = RemedySettings(index_url, extra_index_urls, find_links)
    run_and_report(select_hosts(hosts, remedies, **opts), command="fix", fmt=fmt, output=output,
                   fix=True, dry_run=dry_run)

