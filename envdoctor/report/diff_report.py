"""Reports of ``envdoctor diff``: per item the majority value and the hosts that differ, in
text, JSON and JUnit; and the per-node reports (``snapshot --format json``) diff reads back.

JSON: ``{"hosts": [{"host", "destination", "ok", "differs": [item keys], "error"?}],
"items_compared", "differences": [{"item", "category", "majority", "hosts_with_majority",
"of", "differs": [{"host", "value", "detail"?}], "unknown"?, "tie"?, "ignored"?}],
"unknown": {item: [hosts]}}``. JUnit: one suite per host, one case per category of
items, failing where the host differs from the majority.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envdoctor.compare.have import CATEGORIES, Have
from envdoctor.compare.majority import Difference
from envdoctor.engine.facts import Problem
from envdoctor.errors import UsageError
from envdoctor.inventory import HostSpec
from envdoctor.operations.compare import DiffReport, HostHave, compare_hosts
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json
from envdoctor.report.merge import read_report
from envdoctor.safe_text import xml_safe

SHOWN_HOSTS = 8
READ_HINT = "diff reads the JSON of `envdoctor snapshot HOST --format json` (one file per node, or one for many)"


def host_json(host: HostHave, report: DiffReport) -> dict[str, Any]:
    differs = [d.key for d in report.comparison.differs_on(host.spec.name)]
    data: dict[str, Any] = {"host": host.spec.name,
                            "destination": report.sources.get(host.spec.name, host.spec.destination),
                            "ok": host.ok and not any(d for d in report.comparison.differs_on(host.spec.name)
                                                      if not d.ignored),
                            "differs": differs}
    if host.spec.venv:
        data["venv"] = host.spec.venv
    if host.problem is not None:
        data["error"] = host.problem.message
        if host.problem.hint:
            data["hint"] = host.problem.hint
    return data


def render_json(report: DiffReport, *, config: Config = NO_CONFIG) -> str:
    comparison = report.comparison
    body = {"hosts": [host_json(h, report) for h in report.hosts],
            "items_compared": comparison.compared,
            "differences": [d.to_json() for d in comparison.differences],
            "unknown": {key: list(hosts) for key, hosts in comparison.unknown.items()}}
    return dump_json("diff", report.exit_status, body, config=config)


def _hosts(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_HOSTS])
    return shown + (f", ... (+{len(names) - SHOWN_HOSTS})" if len(names) > SHOWN_HOSTS else "")


def difference_lines(difference: Difference) -> list[str]:
    mark = "~" if difference.ignored else "✗"
    tie = ", a tie" if difference.tie else ""
    ignored = " (ignored)" if difference.ignored else ""
    lines = [(f"  {mark} {difference.key}{ignored}: {difference.majority} on {len(difference.holders)} of "
              f"{difference.of}{tie} ({_hosts(difference.holders)})")]
    by_value: dict[str, list[str]] = {}
    for other in difference.others:
        by_value.setdefault(other.value, []).append(other.host)
    for value, hosts in by_value.items():
        lines.append(f"      {value} on {_hosts(hosts)}")
        for other in difference.others:
            if other.value == value and other.detail and len(hosts) <= SHOWN_HOSTS:
                lines.append(f"        {other.host}: {other.detail}")
    if difference.unknown:
        lines.append(f"      unknown on {_hosts(difference.unknown)}")
    return lines


def render_text(report: DiffReport) -> str:
    comparison = report.comparison
    reached = [h for h in report.hosts if h.have is not None]
    lines = [f"diff of {len(report.hosts)} host(s): {comparison.compared} items compared on {len(reached)}"]
    for host in report.hosts:
        if host.problem is not None:
            lines.append(f"  ✗ {host.spec.name}: not compared: {host.problem.message}")
            if host.problem.hint:
                lines.append(f"      hint: {host.problem.hint}")
    failing = [d for d in comparison.differences if not d.ignored]
    if not comparison.differences:
        lines.append("  the same on every host compared" if len(reached) > 1 else
                     "  one host: nothing to compare it with")
    else:
        lines.append(f"  {len(failing)} item(s) differ" + (f", {len(comparison.differences) - len(failing)} ignored"
                                                           if len(failing) < len(comparison.differences) else ""))
    current = ""
    for difference in sorted(comparison.differences, key=lambda d: (_order(d.key), d.key)):
        if difference.category != current:
            current = difference.category
            lines.append(f"{current}:")
        lines.extend(difference_lines(difference))
    if comparison.unknown:
        lines.append(f"not hashed or not known on some hosts ({len(comparison.unknown)} item(s), the others agree): "
                     + ", ".join(sorted(comparison.unknown)[:5]) + (", ..." if len(comparison.unknown) > 5 else ""))
    return "\n".join(lines) + "\n"


def _order(key: str) -> int:
    """Categories in the order of CATEGORIES (the interpreter first, variables last)."""
    names = list(dict.fromkeys(CATEGORIES.values()))
    category = CATEGORIES.get(key.split(":", 1)[0], "other")
    return names.index(category) if category in names else len(names)


def render_junit(report: DiffReport) -> str:
    root = ET.Element("testsuites", name="envdoctor diff")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    categories = list(dict.fromkeys(CATEGORIES.values()))
    for host in report.hosts:
        suite = ET.SubElement(root, "testsuite", name=host.spec.name)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        if host.problem is not None:
            case = ET.SubElement(suite, "testcase", classname=host.spec.name, name="compared")
            ET.SubElement(case, "error", message=host.problem.message, type="error")
            counts["tests"] += 1
            counts["errors"] += 1
        else:
            mine = report.comparison.differs_on(host.spec.name)
            for category in categories:
                case = ET.SubElement(suite, "testcase", classname=host.spec.name, name=category)
                counts["tests"] += 1
                found = [d for d in mine if d.category == category and not d.ignored]
                if found:
                    text = "\n".join(_host_line(d, host.spec.name) for d in found)
                    ET.SubElement(case, "failure", message=f"{len(found)} item(s) differ from the majority",
                                  type="fail").text = text
                    counts["failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + xml_safe(ET.tostring(root, encoding="unicode")) + "\n"


def _host_line(difference: Difference, host: str) -> str:
    other = next(o for o in difference.others if o.host == host)
    line = f"{difference.key}: {other.value} (majority {difference.majority} on {len(difference.holders)} of " \
           f"{difference.of})"
    return line + (f" [{other.detail}]" if other.detail else "")


def render(report: DiffReport, fmt: str, *, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        return render_json(report, config=config)
    if fmt == "junit":
        return render_junit(report)
    return render_text(report)


# --- per-node reports ---------------------------------------------------------------------

def diff_reports(paths: Sequence[Path], ignore: Sequence[str] = ()) -> DiffReport:
    """Per-node reports (``envdoctor snapshot local --format json``) compared as hosts are. A
    report of host ``local`` is named after its file; a host named twice is a usage error;
    a host without a ``have`` object is reported as not compared."""
    hosts: list[HostHave] = []
    sources: dict[str, str] = {}
    for path in paths:
        try:
            data = read_report(path)
        except UsageError as exc:
            raise UsageError(str(exc), hint=READ_HINT if exc.hint else "") from None
        for entry in data["hosts"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("host"), str):
                raise UsageError(f"{path}: a host entry without a \"host\" name")
            name = path.stem if entry["host"] == "local" else entry["host"]
            if name in sources:
                raise UsageError(f"host {name} is in both {sources[name]} and {path}",
                                 hint="give each node's report once (name the files after the nodes)")
            sources[name] = str(path)
            hosts.append(_host_of(entry, name, path))
    if not hosts:
        raise UsageError("the reports name no host")
    return compare_hosts(hosts, ignore, sources)


def _host_of(entry: dict[str, Any], name: str, path: Path) -> HostHave:
    spec = HostSpec(name=name, ssh=None, venv=entry["venv"] if isinstance(entry.get("venv"), str) else None)
    have = entry.get("have")
    if isinstance(have, dict):
        return HostHave(spec, Have.from_json(have))
    if isinstance(entry.get("error"), str):
        return HostHave(spec, None, Problem("probe", entry["error"]))
    return HostHave(spec, None, Problem(
        "probe", f"{path} carries no \"have\" for {name}",
        hint=f"{READ_HINT}; check's JSON does not carry what a host has"))
