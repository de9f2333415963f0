"""``envdoctor diff``: what hosts that run one job have, compared item by item."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import (
    MODEL,
    REQUIRE,
    connection_options,
    environment_options,
    output_options,
)
from envdoctor.cli.output import ProgressLine, emit
from envdoctor.cli.selection import select_hosts
from envdoctor.errors import UsageError

IGNORE = click.option(
    "--ignore", "ignore", multiple=True, metavar="PATTERN",
    help="Report the items whose key matches PATTERN (fnmatch: 'env:CUDA_VISIBLE_DEVICES', 'dist:*') "
         "without failing on them (repeatable).")


def report_paths(targets: tuple[str, ...]) -> list[Path] | None:
    """The targets as report files when every one ends in .json; None when none does."""
    reports = [t for t in targets if t.endswith(".json")]
    if not reports:
        return None
    if len(reports) != len(targets):
        raise UsageError("give hosts or REPORT.json files, not both",
                         hint="envdoctor diff train  or  envdoctor diff /shared/snapshots/*.json")
    paths = [Path(t) for t in reports]
    for path in paths:
        if not path.is_file():
            raise UsageError(f"no report file {path}",
                             hint="write one per node with `envdoctor snapshot local --format json --output FILE`")
    return paths


@click.command("diff")
@click.argument("targets", nargs=-1, required=True, metavar="GROUP|HOST...|REPORT.json...")
@connection_options
@environment_options
@REQUIRE
@MODEL
@IGNORE
@output_options()
@handle_errors
def diff(targets: tuple[str, ...], ignore: tuple[str, ...], fmt: str, output: str | None, **opts: Any) -> None:
    """Compare what the hosts of one job have; per item, the majority value and the hosts that differ.

    Compared: the interpreter; each distribution of the job's venv (version) and, for those the
    job imports (--require, the serving and training libraries, and what they require), a digest
    of their installed files (a local edit shows, named against RECORD); the patch ledger;
    torch, its CUDA build, NCCL, cuDNN and the driver; the GPU model and count; every file of
    each --model folder (config, tokenizer and code files by hash, weights by size and a sampled
    hash); the job's environment variables (NCCL_*, CUDA_*, HF_*, torch's and the frameworks';
    secrets masked on the host). Hashing is bounded and cached on each host.

    With REPORT.json files (`envdoctor snapshot local --format json` on each node, collected by
    the scheduler) the reports are compared instead; a report of host `local` is named after
    its file. Exit 1 when anything differs (or a host could not be compared), 0 when the hosts
    have the same.

    \b
    Examples:
      envdoctor diff train
      envdoctor diff n1 n2 n3 --venv /root/venv_sglang211 --model /root/models/Kimi-K2.6
      envdoctor diff /shared/snapshots/*.json --format junit --output drift.xml
    """
    from envdoctor.report.diff_report import (  # (the comparison's modules: when it runs)
        diff_reports,
        render,
    )

    paths = report_paths(targets)
    if paths is not None:
        flags = {"venv": "--venv", "models": "--model", "requires": "--require"}
        given = [flag for name, flag in flags.items() if opts.get(name)]
        if given:
            raise UsageError(f"{given[0]} applies to hosts; a report already says what its host has")
        report = diff_reports(paths, ignore)
        text = render(report, fmt)
    else:
        from envdoctor.operations.compare import diff_hosts

        selection = select_hosts(targets, runs_checks=False, **opts)
        with ProgressLine(len(selection.specs)) as progress:
            report = diff_hosts(selection.specs, selection.settings, ignore=ignore, progress=progress)
        text = render(report, fmt, config=selection.config)
    failing = [d for d in report.comparison.differences if not d.ignored]
    unreached = [h for h in report.hosts if not h.ok]
    summary = f"{len(failing)} item(s) differ" if failing else "the same on every host"
    if unreached:
        summary += f"; {len(unreached)} host(s) not compared"
    emit(text, output, summary)
    sys.exit(report.exit_status)
