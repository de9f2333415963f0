"""Reports of ``envdoctor scan``: text for people, JSON as the contract says, SARIF."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from envdoctor.report import sarif
from envdoctor.report.envelope import dump_json
from envdoctor.scan.loaders import STATES
from envdoctor.scan.scanner import ScanReport


def render_json(scans: Sequence[tuple[Path, ScanReport]]) -> str:
    """``{"sites": [...], "errors": [...]}``; each path relative to the folder it was found in."""
    data = {
        "sites": [s.to_json() for _, r in scans for s in r.sites],
        "errors": [e.to_json() for _, r in scans for e in r.errors],
    }
    return dump_json("scan", scan_exit_status(scans), data)


def scan_exit_status(scans: Sequence[tuple[Path, ScanReport]]) -> int:
    """1 when a call is missing the flag or passes False."""
    return 1 if any(r.gaps for _, r in scans) else 0


def render_text(scans: Sequence[tuple[Path, ScanReport]]) -> str:
    lines: list[str] = []
    states: Counter[str] = Counter()
    files = parsed = 0
    for root, report in scans:
        if len(scans) > 1:
            lines.append(f"{root}:")
        indent = "  " if len(scans) > 1 else ""
        for site in report.sites:
            states[site.state] += 1
            flag = {"ok": "passes trust_remote_code=True", "missing": "no trust_remote_code",
                    "explicit-false": "trust_remote_code=False", "parameterized": "trust_remote_code from an expression",
                    "kwargs": "trust_remote_code only if in **kwargs"}[site.state]
            lines.append(f"{indent}{site.path}:{site.line}:{site.column + 1}: {site.state:<14} {site.callee}  ({flag})")
        for error in report.errors:
            lines.append(f"{indent}{error.path}: error: {error.message}")
        files += report.files
        parsed += report.parsed
    total = sum(states.values())
    counts = ", ".join(f"{states[s]} {s}" for s in STATES)
    errors = sum(len(r.errors) for _, r in scans)
    lines.append(f"{total} model-loading call(s) in {files} file(s) ({parsed} parsed): {counts}"
                 + (f"; {errors} file(s) could not be scanned" if errors else ""))
    return "\n".join(lines) + "\n"


def render(scans: Sequence[tuple[Path, ScanReport]], fmt: str) -> str:
    if fmt == "json":
        return render_json(scans)
    if fmt == "sarif":
        return sarif.render(scans)
    return render_text(scans)
