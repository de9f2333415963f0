"""``envdoctor merge``: per-node JSON reports folded into one fleet report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from envdoctor.cli.exits import handle_errors
from envdoctor.cli.options import output_options
from envdoctor.cli.output import emit
from envdoctor.report import render
from envdoctor.report.merge import common_outcomes, group_hosts, merge_reports, render_groups_text


@click.command("merge")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...",
                type=click.Path(dir_okay=False, path_type=Path))
@output_options()
@handle_errors
def merge(reports: tuple[Path, ...], fmt: str, output: str | None) -> None:
    """Fold per-node JSON reports into one fleet report, hosts grouped by what differs.

    For clusters where every node runs its own gate (`envdoctor check local --format json
    --output /shared/preflight/$(hostname).json` in a Slurm prolog or an init container):
    a report of host `local` is named after its file. Exit 1 when any host has a problem.

    \b
    Example:
      envdoctor merge /shared/preflight/*.json --format junit --output fleet.xml
    """
    report = merge_reports(reports)
    groups = group_hosts(report.hosts)
    if fmt == "json":
        data = json.loads(render(report, "json"))
        data["schema"] = 1
        data["groups"] = [g.to_json() for g in groups]
        data["common"] = [{"id": o.check_id, "status": o.status} for o in common_outcomes(report.hosts)]
        text = json.dumps(data, indent=2) + "\n"
    elif fmt == "text":
        text = render_groups_text(groups, common_outcomes(report.hosts)) + "\n" + render(report, "text")
    else:
        text = render(report, fmt)
    bad = sum(1 for h in report.hosts if not h.ok)
    emit(text, output, f"{bad} of {len(report.hosts)} host(s) with problems" if bad else "all OK")
    sys.exit(report.exit_status)
