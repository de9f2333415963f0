"""Reports: every command's values rendered as text for people, JSON (the contract, inside
the envelope of ``envelope``) and JUnit XML for CI; ``merge`` folds per-node JSON reports into
one, ``hosts_plan`` shows where each destination is.

May import: everything below it (operations, stages, the domain packages, engine). Never cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envdoctor.logsafe import redact_secret_values
from envdoctor.report.envelope import NO_CONFIG, Config

if TYPE_CHECKING:  # (the fleet and its event loop are not start-up of `hosts`, `scan`, `merge`)
    from envdoctor.operations.fleet import FleetReport

FORMATS = ("text", "json", "junit")
#: The formats of `envdoctor scan` (envdoctor.report.scan_report renders them).
SCAN_FORMATS = ("text", "json", "sarif")


def render(report: FleetReport, fmt: str, *, color: bool = False, width: int = 100, config: Config = NO_CONFIG) -> str:
    """``config``: the inventory the command read, named by the JSON (see envdoctor.report.envelope)."""
    # A remedy's command line or output may carry an index URL's password or a token.
    return redact_secret_values(_render(report, fmt, color=color, width=width, config=config))


def _render(report: FleetReport, fmt: str, *, color: bool, width: int, config: Config) -> str:
    # Each format is imported when asked for: the text report's rich costs 25 ms of start-up
    # that a CI gate writing JSON or JUnit does not need.
    if fmt == "json":
        from envdoctor.report import json_report

        return json_report.render(report, config=config)
    if fmt == "junit":
        from envdoctor.report import junit

        return junit.render(report)
    from envdoctor.report import text

    return text.render(report, color=color, width=width)
