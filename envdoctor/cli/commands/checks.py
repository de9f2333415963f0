"""``envdoctor checks``: the check graph, in the order it runs."""

from __future__ import annotations

from pathlib import Path

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import FILE, output_options
from envdoctor.cli.output import emit
from envdoctor.engine.graph import load_checks
from envdoctor.report.listing import render_checks


@click.command("checks")
@click.option("--checks", "check_files", multiple=True, type=FILE,
              help="Also list the checks in this file (repeatable).")
@output_options()
@handle_errors
def list_checks(check_files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """List the checks, in the order they run, with what each requires."""
    emit(render_checks(load_checks(Path(p) for p in check_files), fmt), output)
