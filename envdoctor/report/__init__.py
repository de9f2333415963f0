"""Reports of a fleet run: doctor-style text, JSON (the contract) and JUnit XML."""

from __future__ import annotations

from envdoctor.fleet import FleetReport
from envdoctor.logsafe import redact_secret_values
from envdoctor.report import json_report, junit, text

FORMATS = ("text", "json", "junit")


def render(report: FleetReport, fmt: str, *, color: bool = False, width: int = 100) -> str:
    # A remedy's command line or output may carry an index URL's password or a token.
    return redact_secret_values(_render(report, fmt, color=color, width=width))


def _render(report: FleetReport, fmt: str, *, color: bool, width: int) -> str:
    if fmt == "json":
        return json_report.render(report)
    if fmt == "junit":
        return junit.render(report)
    return text.render(report, color=color, width=width)
