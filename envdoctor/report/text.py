"""Doctor-style text: per host, what is wrong, why it matters, and the exact fix."""

from __future__ import annotations

import io
import shlex
from collections import Counter

from rich.console import Console
from rich.text import Text

from envdoctor.engine.results import CheckResult, Status
from envdoctor.operations.fleet import FleetReport, HostReport
from envdoctor.safe_text import single_line

MAX_ID_WIDTH = 24

MARKS = {
    Status.PASS: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "red"),
    Status.ERROR: ("✗", "red bold"),
    Status.BLOCKED: ("·", "magenta"),
    Status.SKIPPED: ("-", "dim"),
    Status.WAIVED: ("~", "cyan"),
}


def _counts(results: list[CheckResult]) -> str:
    counts = Counter(r.status for r in results)
    order = [Status.FAIL, Status.ERROR, Status.BLOCKED, Status.WARN, Status.PASS, Status.WAIVED, Status.SKIPPED]
    words = {Status.FAIL: "failed", Status.ERROR: "error", Status.BLOCKED: "blocked",
             Status.WARN: "warning", Status.PASS: "passed", Status.SKIPPED: "skipped", Status.WAIVED: "waived"}
    return ", ".join(f"{counts[s]} {words[s]}" for s in order if counts[s])


def _result_lines(result: CheckResult, id_width: int, host: str) -> list[Text]:
    mark, style = MARKS[result.status]
    line = Text("  ")
    line.append(mark, style=style)
    line.append(f" {result.id:<{id_width}}  ", style="bold" if result.status.is_problem else "")
    message = result.message if result.status is not Status.SKIPPED else f"skipped: {result.message}"
    first, *more = message.split("\n")  # a check's separate findings (pip check, extras) stay apart
    line.append(first, style="dim" if result.status is Status.SKIPPED else "")
    lines = [line]
    indent = " " * (id_width + 6)
    lines += [Text(f"{indent}{extra}") for extra in more]
    if result.status.is_problem or result.status is Status.WARN:
        if result.why:
            lines.append(Text(f"{indent}why: ", style="dim").append(result.why, style=""))
        if result.remedy is not None:
            label = "fix: " if result.remedy.automatic else "fix (by hand): "
            lines.append(Text(f"{indent}{label}", style="dim").append(result.remedy.display, style="cyan"))
            if result.remedy.unlocked_by:  # the options that would let fix do it: named, not only in JSON
                lines.append(Text(f"{indent}fix does it with: ", style="dim").append(
                    f"envdoctor fix {shlex.quote(host)} {result.remedy.unlocked_by}", style="cyan"))
    return lines


def _diff_lines(diff: str) -> list[Text]:
    styles = {"+": "green", "-": "red", "@": "cyan"}
    return [Text(f"      {line}", style=styles.get(line[:1], "dim")) for line in diff.splitlines()]


def _plan_lines(plan: tuple[str, ...], command: str) -> list[Text]:
    """The installer's plan for an install remedy (pip's, or uv's in a venv without pip), one
    distribution a line."""
    try:
        words = shlex.split(command)[:3]
    except ValueError:
        words = []
    installer = "uv" if words[:1] and words[0].rsplit("/", 1)[-1] == "uv" and words[1:] == ["pip", "install"] else "pip"
    return [Text(f"      {installer}'s plan: {item}", style="dim") for item in plan]


def _skipped_lines(results: list[CheckResult]) -> list[Text]:
    """Skipped checks, one line per reason, so that what ran stays readable at a glance."""
    by_reason: dict[str, list[str]] = {}
    for result in results:
        if result.status is Status.SKIPPED:
            by_reason.setdefault(result.message, []).append(result.id)
    mark, style = MARKS[Status.SKIPPED]
    return [
        Text("  ").append(mark, style=style).append(f" skipped: {', '.join(ids)}: {reason}", style=style)
        for reason, ids in by_reason.items()
    ]


def _host_block(host: HostReport) -> list[Text]:
    spec = host.spec
    head = Text()
    head.append(spec.name, style="bold")
    if spec.destination != spec.name:
        head.append(f"  {spec.destination}", style="dim")
    if spec.venv:
        head.append(f"  venv {spec.venv}", style="dim")
    head.append("  ")
    head.append("OK" if host.ok else "PROBLEMS", style="green bold" if host.ok else "red bold")
    lines = [head]
    shown = [r for r in host.results if r.status is not Status.SKIPPED]
    # Long ids (patch.<id>) would push every message far right; they overflow instead.
    id_width = min(max((len(r.id) for r in shown), default=10), MAX_ID_WIDTH)
    for result in shown:
        lines.extend(_result_lines(result, id_width, spec.name))
    lines.extend(_skipped_lines(host.results))
    if host.before is not None:
        if host.actions:
            lines.append(Text("  fix:", style="bold"))
            for action in host.actions:
                if action.refused:
                    lines.append(Text("    ✗ not run, fix (by hand): ", style="red").append(action.command, style="cyan"))
                    lines.extend(_plan_lines(action.plan, action.command))
                    lines.append(Text(f"      why: {action.refused}", style="dim"))
                elif action.exit_status is None:
                    lines.append(Text("    would run: ", style="yellow").append(action.command, style="cyan"))
                    lines.extend(_plan_lines(action.plan, action.command))
                    lines.extend(_diff_lines(action.diff))
                else:
                    mark, style = ("✓", "green") if action.ok else ("✗", "red")
                    entry = Text("    ").append(mark, style=style).append(f" {action.command}", style="cyan")
                    if not action.ok:
                        entry.append(f"  (exit status {action.exit_status})", style="red")
                    lines.append(entry)
                    if not action.ok and action.output:
                        for out_line in action.output.strip().splitlines()[-5:]:
                            lines.append(Text(f"      {out_line}", style="dim"))
            lines.append(Text(f"  before: {_counts(host.before)}  ->  now: {_counts(host.results)}", style="dim"))
            changed = host.changed
            if changed:
                lines.append(Text("  changed:", style="bold"))
                lines += [Text(f"    {change.line()}") for change in changed]
        else:
            lines.append(Text("  fix: nothing to do", style="dim"))
    return lines


def render(report: FleetReport, *, color: bool = False, width: int = 100) -> str:
    buffer = io.StringIO()
    console = Console(
        file=buffer, force_terminal=color, no_color=not color, width=width,
        highlight=False, soft_wrap=True, emoji=False,
    )
    for host in report.hosts:
        for line in _host_block(host):
            console.print(single_line(line))  # a newline or ESC from a host or model: escaped
        console.print()
    bad = [h for h in report.hosts if not h.ok]
    summary = Text(f"{len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''} checked: ")
    if bad:
        summary.append(f"{len(bad)} with problems ({', '.join(h.spec.name for h in bad)})", style="red bold")
    else:
        summary.append("all OK", style="green bold")
    console.print(summary)
    return buffer.getvalue()
