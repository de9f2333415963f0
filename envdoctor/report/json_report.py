"""``--format json``: ``{"hosts": [{"host": ..., "results": [{"id", "status", "message", ...}]}]}``."""

from __future__ import annotations

from typing import Any

from envdoctor.operations.fleet import FleetReport, HostReport
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json


def host_json(host: HostReport) -> dict[str, Any]:
    data: dict[str, Any] = {
        "host": host.spec.name,
        "destination": host.spec.destination,
        "ok": host.ok,
        "timed_out": host.timed_out,
        "results": [r.to_json() for r in host.results],
    }
    if host.spec.venv:
        data["venv"] = host.spec.venv
    if host.before is not None:
        data["before"] = [r.to_json() for r in host.before]
        data["actions"] = [a.to_json() for a in host.actions]
        data["changed"] = [c.to_json() for c in host.changed]
    return data


def render(report: FleetReport, *, config: Config = NO_CONFIG) -> str:
    return dump_json(report.command, report.exit_status, {"hosts": [host_json(h) for h in report.hosts]},
                     config=config)
