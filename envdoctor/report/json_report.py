"""``--format json``: ``{"hosts": [{"host": ..., "results": [{"id", "status", "message", ...}]}]}``."""

from __future__ import annotations

import json
from typing import Any

from envdoctor import __version__
from envdoctor.fleet import FleetReport, HostReport


def host_json(host: HostReport) -> dict[str, Any]:
    data: dict[str, Any] = {
        "host": host.spec.name,
        "destination": host.spec.destination,
        "ok": host.ok,
        "results": [r.to_json() for r in host.results],
    }
    if host.spec.venv:
        data["venv"] = host.spec.venv
    if host.before is not None:
        data["before"] = [r.to_json() for r in host.before]
        data["actions"] = [a.to_json() for a in host.actions]
    return data


def render(report: FleetReport) -> str:
    data = {
        "envdoctor": __version__,
        "command": report.command,
        "exit_status": report.exit_status,
        "hosts": [host_json(h) for h in report.hosts],
    }
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
