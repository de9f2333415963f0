"""``envdoctor scan``: model-loading calls without trust_remote_code in Python source."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envdoctor.cli.exits import EXIT_OK, EXIT_PROBLEMS, handle_errors
from envdoctor.cli.options import output_options
from envdoctor.cli.output import emit
from envdoctor.errors import UsageError
from envdoctor.report import SCAN_FORMATS
from envdoctor.report.scan_report import render as render_scan
from envdoctor.scan.scanner import TrustRemoteCodeScanner


@click.command("scan")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@output_options(SCAN_FORMATS, "Report format: text for people, json for programs, sarif for code-scanning tools.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes that parse files.")
@handle_errors
def scan(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int) -> None:
    """Find model-loading calls without trust_remote_code in Python source.

    PATH is a file or a folder (a site-packages folder, a package, a repository).
    Exit status 1 when a call is missing the flag or passes False; 2 when a file named
    as PATH cannot be read as Python reads it (UTF-8, or the codec its coding declaration
    names) or does not parse (in a folder such files are listed as errors).

    \b
    Examples:
      envdoctor scan /root/venv/lib/python3.11/site-packages/speculators
      envdoctor scan . --format sarif --output trust-remote-code.sarif
    """
    for path in paths:
        if not Path(path).exists():
            raise UsageError(f"{path} does not exist", hint="give a Python file or a folder to scan")
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise UsageError(f"{path} is neither a file nor a folder", hint="give a Python file or a folder to scan")
    scanner = TrustRemoteCodeScanner(jobs=jobs)
    scans = [(Path(p), scanner.scan([p])) for p in paths]
    for root, report in scans:
        # A file named on the command line that cannot be read as Python is bad input; inside a
        # folder such a file is listed with the rest (site-packages holds test data that does not parse).
        if root.is_file() and report.errors:
            raise UsageError(f"{root}: {report.errors[0].message}",
                             hint="scan reads a file as Python does (UTF-8 unless a coding declaration on its first "
                                  "two lines names another codec): fix the file, or scan its folder "
                                  "to list it among the files that could not be scanned")
    gaps = sum(len(r.gaps) for _, r in scans)
    emit(render_scan(scans, fmt), output, f"{gaps} call(s) without trust_remote_code" if gaps else "no gaps")
    sys.exit(EXIT_PROBLEMS if gaps else EXIT_OK)
