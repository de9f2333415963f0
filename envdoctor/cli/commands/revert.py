"""``envdoctor revert``: a recorded patch's original files put back from their backups."""

from __future__ import annotations

import sys
from typing import Any

import click

from envdoctor.cli.commands.patches import known_patch
from envdoctor.cli.exits import EXIT_OK, EXIT_PROBLEMS, handle_errors
from envdoctor.cli.options import PATCHES, connection_options, environment_options, output_options
from envdoctor.cli.output import ProgressLine, emit
from envdoctor.cli.selection import select_hosts
from envdoctor.operations.revert import run_revert
from envdoctor.report.revert_report import render_revert


@click.command()
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@click.argument("patch_id", metavar="PATCH")
@connection_options
@environment_options
@PATCHES
@output_options()
@handle_errors
def revert(hosts: tuple[str, ...], patch_id: str, fmt: str, output: str | None, **opts: Any) -> None:
    """Restore the original files of PATCH on HOST from envdoctor's backups.

    Only a file that is still exactly what envdoctor wrote is restored; the revert is
    recorded in the environment's ledger.

    \b
    Example:
      envdoctor revert ct200 speculators-tokenizer-trust-remote-code --venv /root/venv_sglang211
    """
    known_patch(patch_id, opts["patch_files"])  # a typo is a usage error, not a host's
    selection = select_hosts(hosts, runs_checks=False, **opts)
    with ProgressLine(len(selection.specs)) as progress:
        results = run_revert(selection.specs, selection.settings, patch_id, progress)
    bad = sum(1 for r in results if not r.ok)
    emit(render_revert(results, fmt, config=selection.config), output,
         f"{bad} host(s) not reverted" if bad else "reverted")
    sys.exit(EXIT_PROBLEMS if bad else EXIT_OK)
