"""Reports of ``envdoctor drift``: text grouped by consumer→provider pair, JSON, JUnit."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from envdoctor.drift.judge import ERROR, UNRESOLVED, WARN
from envdoctor.operations.drift import DriftReport, HostDrift
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json

MARKS = {ERROR: "✗", WARN: "!", UNRESOLVED: "?"}


def host_json(host: HostDrift) -> dict[str, Any]:
    data: dict[str, Any] = {"host": host.host, "destination": host.destination, "ok": host.ok}
    if host.problem is not None:
        data["error"] = host.problem
        if host.hint:
            data["hint"] = host.hint
        return data
    data.update(stats=host.stats, errors=list(host.errors), not_installed=list(host.not_found))
    return data


def render_json(report: DriftReport, *, config: Config = NO_CONFIG) -> str:
    pairs = [{"host": h.host, **p.to_json(verbose=True)} for h in report.hosts for p in h.pairs]
    return dump_json("drift", report.exit_status, {"pairs": pairs, "hosts": [host_json(h) for h in report.hosts]},
                     config=config)


def render_text(report: DriftReport, verbose: bool = False) -> str:
    lines: list[str] = []
    for host in report.hosts:
        lines.append(f"{host.host}  {host.destination}  {'OK' if host.ok else 'PROBLEMS'}")
        if host.problem is not None:
            lines.append(f"  ✗ {host.problem}")
            if host.hint:
                lines.append(f"    hint: {host.hint}")
            continue
        entry, unfound = host.stats.get("entry"), host.stats.get("entries_unfound")
        if unfound:
            lines.append(f"  ! entry {', '.join(unfound)} is neither a module of the checked libraries nor a script "
                         "on the host: every consumer file checked")
        elif entry:
            lines.append(f"  follows the imports of {entry if isinstance(entry, str) else ', '.join(entry)}")
        for missing in host.stats.get("baselines_missing") or ():
            lines.append(f"  ! --baseline {missing} is not a folder on the host")
        if not host.pairs:
            lines.append("  no installed library to check (none depends on transformers, vllm or sglang; --drift DIST names one)")
        for pair in host.pairs:
            shown = [f for f in pair.findings if verbose or f.severity != UNRESOLVED]
            hidden = pair.count(UNRESOLVED) + pair.unresolved_counted if not verbose else 0
            counted = pair.unresolved_counted if verbose else 0  # (only examples of those are findings)
            tail = f" ({pair.uses} uses checked" + (f", {hidden} unresolved: -v" if hidden else "") + \
                (f", {counted} more unresolved, counted on the host" if counted else "") + ")"
            lines.append(f"  {pair.headline()}{tail}")
            if pair.known_good is not None:
                lines.append(f"    also checked against {pair.known_good.describe()}")
            for finding in shown:
                lines.append(f"    {MARKS[finding.severity]} {finding.path}:{finding.line}  {finding.use}")
                lines.append(f"      {finding.why}" + (f"  [{finding.definition}]" if finding.definition else ""))
            if pair.count(ERROR) or pair.count(WARN):
                lines.append(f"    fix (by hand): {pair.remedy}")
        stats = host.stats
        lines.append(f"  {stats.get('files_parsed')} files parsed on the host in {stats.get('host_seconds')} s"
                     f" (cache {stats.get('cache')}); judged here in {stats.get('controller_seconds')} s")
        for error in host.errors[:5]:
            lines.append(f"  ? {error.get('path')}: {error.get('message')}")
    bad = sum(1 for h in report.hosts if not h.ok)
    lines.append("")
    lines.append(f"{len(report.hosts)} host(s) checked: " + (f"{bad} with API drift or problems" if bad else "no API drift found"))
    return "\n".join(lines) + "\n"


def render_junit(report: DriftReport) -> str:
    suites = ET.Element("testsuites", name="envdoctor drift")
    for host in report.hosts:
        suite = ET.SubElement(suites, "testsuite", name=host.host)
        cases = 0
        failures = 0
        if host.problem is not None:
            case = ET.SubElement(suite, "testcase", classname=host.host, name="host")
            ET.SubElement(case, "error", message=host.problem)
            cases, failures = 1, 1
        for pair in host.pairs:
            cases += 1
            case = ET.SubElement(suite, "testcase", classname=host.host, name=pair.title)
            errors = [f for f in pair.findings if f.severity == ERROR]
            if errors:
                failures += 1
                failure = ET.SubElement(case, "failure", message=pair.headline())
                failure.text = "\n".join(f"{f.path}:{f.line} {f.use}: {f.why} [{f.definition}]" for f in errors) + \
                    f"\nfix (by hand): {pair.remedy}"
        suite.set("tests", str(cases))
        suite.set("failures", str(failures))
    return ET.tostring(suites, encoding="unicode") + "\n"


def render(report: DriftReport, fmt: str, verbose: bool = False, *, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        return render_json(report, config=config)
    if fmt == "junit":
        return render_junit(report)
    return render_text(report, verbose)
