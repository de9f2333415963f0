"""Reports of ``envdoctor audit``: text grouped by distribution, JSON (the contract), JUnit."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

from rich.console import Console
from rich.text import Text

from envdoctor.audit.records import AuditReport, FileState, HostAudit, display_path
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json
from envdoctor.safe_text import single_line, xml_safe

STATE_STYLES = {
    FileState.PATCHED: "green",
    FileState.MODIFIED: "red",
    FileState.MISSING: "red",
    FileState.REVERTED: "yellow",
    FileState.EXTRA: "magenta",
    FileState.OUTSIDE: "red",
}
NO_DISTRIBUTION = "(no distribution)"


def host_json(host: HostAudit) -> dict[str, Any]:
    data: dict[str, Any] = {"host": host.host, "destination": host.destination, "ok": host.ok}
    if host.problem is not None:
        data["error"] = host.problem
        data["files"] = []
        return data
    data.update(
        prefix=host.prefix,
        python=host.python,
        default_interpreter=host.default_env,
        site_packages=list(host.site_packages),
        files=[f.to_json() for f in host.files],
        counts=dict(Counter(str(f.state) for f in host.files)),
        notes=list(host.notes) + [f"{d.name} {d.version}: {n}" for d in host.distributions for n in d.notes],
        conflicts=list(host.conflicts),
        distributions=[
            {"name": d.name, "version": d.version, "path": d.path, "kind": d.kind, "record": d.record,
             "files": d.files, "verified": d.verified, "problems": d.problems}
            for d in host.distributions
        ],
        stats=dict(host.stats),
    )
    return data


def render_json(report: AuditReport, *, config: Config = NO_CONFIG) -> str:
    return dump_json("audit", report.exit_status, {"hosts": [host_json(h) for h in report.hosts]}, config=config)


def _host_lines(host: HostAudit) -> list[Text]:
    head = Text()
    head.append(host.host, style="bold")
    if host.destination != host.host:
        head.append(f"  {host.destination}", style="dim")
    if host.problem is not None:
        head.append("  ERROR", style="red bold")
        lines = [head, Text(f"  {host.problem}", style="red")]
        if host.hint:
            lines.append(Text(f"  hint: {host.hint}", style="dim"))
        return lines
    head.append("  OK" if host.ok else "  DIFFERENCES", style="green bold" if host.ok else "red bold")
    lines = [head]
    what = "default interpreter" if host.default_env else "venv"
    lines.append(Text(f"  {what} {host.prefix} ({host.python}); site-packages: {', '.join(host.site_packages)}",
                      style="dim"))
    stats = host.stats
    lines.append(Text(
        f"  {stats.get('files', 0)} files ({int(stats.get('bytes', 0)) / 1e6:.1f} MB) in "
        f"{len(host.distributions)} distributions; hashed {stats.get('hashed', 0)}, "
        f"unchanged since last audit {stats.get('cached', 0)}; cache {stats.get('cache', '?')}"
        + ("; nothing changed, last result replayed" if str(stats.get("snapshot", "")).startswith("replayed") else ""),
        style="dim"))
    groups: dict[str, list[Any]] = {}
    for item in host.files:
        groups.setdefault(item.distribution or NO_DISTRIBUTION, []).append(item)
    for name in sorted(groups, key=str.lower):
        counts = Counter(str(f.state) for f in groups[name])
        lines.append(Text(f"  {name}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), style="bold"))
        for item in groups[name]:
            line = Text("    ")
            line.append(f"{item.state:<8}", style=STATE_STYLES[item.state])
            line.append(f" {display_path(item.path)}")
            if item.patches:
                line.append(f"  [{', '.join(item.patches)}]", style="cyan")
            if item.reason:
                line.append(f"  {item.reason}", style="dim")
            lines.append(line)
    for conflict in host.conflicts:
        lines.append(Text(f"  ! {conflict['path']}: listed by {conflict['kept']} and "
                          f"{', '.join(conflict['overwritten'])}; {conflict['kept']}'s copy is in place "
                          f"(it overwrote the other)", style="yellow"))
    for note in host.notes:
        lines.append(Text(f"  ! {note}", style="yellow"))
    for dist in host.distributions:
        for note in dist.notes:
            lines.append(Text(f"  ! {dist.name} {dist.version}: {note}", style="yellow"))
    return lines


def render_text(report: AuditReport, *, color: bool = False, width: int = 100) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=width,
                      highlight=False, soft_wrap=True, emoji=False)
    for host in report.hosts:
        for line in _host_lines(host):
            console.print(single_line(line))  # a host's file name may hold ESC or newlines
        console.print()
    bad = [h.host for h in report.hosts if not h.ok]
    summary = Text(f"{len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} audited: ")
    summary.append(f"differences on {', '.join(bad)}" if bad else "all files as installed or patched by envdoctor",
                   style="red bold" if bad else "green bold")
    console.print(summary)
    return buffer.getvalue()


def render_junit(report: AuditReport) -> str:
    """One suite per host, one case per distribution with differences (or one passing case)."""
    root = ET.Element("testsuites", name="envdoctor audit")
    totals = Counter()
    for host in report.hosts:
        suite = ET.SubElement(root, "testsuite", name=host.host)
        if host.problem is not None:
            case = ET.SubElement(suite, "testcase", classname=host.host, name="audit")
            ET.SubElement(case, "error", message=host.problem, type="error").text = host.hint
            for key, value in (("tests", "1"), ("failures", "0"), ("errors", "1")):
                suite.set(key, value)
            totals.update(tests=1, errors=1)
            continue
        groups: dict[str, list[str]] = {}
        for item in host.files:
            if item.state is not FileState.PATCHED:
                groups.setdefault(item.distribution or NO_DISTRIBUTION, []).append(
                    f"{item.state}: {display_path(item.path)} {item.reason}".rstrip())
        cases = sorted(groups.items()) or [("all files", [])]
        for name, problems in cases:
            case = ET.SubElement(suite, "testcase", classname=host.host, name=name)
            if problems:
                ET.SubElement(case, "failure", message=f"{len(problems)} file(s) differ", type="audit").text = \
                    "\n".join(problems)
        failures = sum(1 for _, p in cases if p)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        totals.update(tests=len(cases), failures=failures)
    for key in ("tests", "failures", "errors"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + xml_safe(ET.tostring(root, encoding="unicode")) + "\n"


def render(report: AuditReport, fmt: str, *, color: bool = False, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        return render_json(report, config=config)
    if fmt == "junit":
        return render_junit(report)
    return render_text(report, color=color)
