"""``envdoctor audit``: every installed file of the venv against its distribution's RECORD."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.audit.records import RecordAuditor
from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import connection_options, environment_options, output_options
from envdoctor.cli.output import ProgressLine, emit, wants_color
from envdoctor.cli.selection import select_hosts
from envdoctor.operations.audit import run_audit
from envdoctor.report.audit_report import render as render_audit


@click.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@connection_options
@environment_options
@click.option("--full", is_flag=True, help="Hash every file again; ignore the stat cache kept on the host.")
@output_options()
@handle_errors
def audit(hosts: tuple[str, ...], full: bool, fmt: str, output: str | None, **opts: Any) -> None:
    """Verify every installed file of the venv against its distribution's RECORD.

    Tells apart envdoctor's recorded patches (patched), foreign changes (modified),
    missing files, patches a reinstall took away (reverted) and code that no RECORD
    lists (extra). Without --venv, audits the default interpreter's site-packages.
    Exit status 1 when anything other than `patched` is found.

    \b
    Examples:
      envdoctor audit ct200 --venv /root/venv_sglang211
      envdoctor audit gpu-fleet --format json --output audit.json
    """
    selection = select_hosts(hosts, runs_checks=False, **opts)
    with ProgressLine(len(selection.specs)) as progress:
        report = run_audit(selection.specs, selection.settings, RecordAuditor(full=full), progress)
    bad = sum(1 for h in report.hosts if not h.ok)
    text = render_audit(report, fmt, color=wants_color(fmt, output), config=selection.config)
    emit(text, output, f"{bad} host(s) with differences" if bad else "all OK")
    sys.exit(report.exit_status)
