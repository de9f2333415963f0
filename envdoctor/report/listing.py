"""``envdoctor checks`` and ``envdoctor patches list|show``: text for people, JSON for programs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from envdoctor.engine.graph import CheckGraph
from envdoctor.patching.engine import GenericPatch, Patch
from envdoctor.report.envelope import dump_json


def checks_rows(graph: CheckGraph) -> list[dict[str, Any]]:
    return [{"id": c, "title": graph.checks[c].title, "requires": list(graph.checks[c].requires),
             "why": graph.checks[c].why} for c in graph.order]


def render_checks(graph: CheckGraph, fmt: str) -> str:
    rows = checks_rows(graph)
    if fmt == "json":
        return dump_json("checks", 0, {"checks": rows})
    if fmt == "junit":
        return _junit("checks", [row["id"] for row in rows])
    width = max((len(row["id"]) for row in rows), default=10)
    lines = []
    for row in rows:
        needs = f"  (after {', '.join(row['requires'])})" if row["requires"] else ""
        lines.append(f"{row['id']:<{width}}  {row['title']}{needs}")
    return "\n".join(lines) + "\n"


def patch_row(patch: Patch | GenericPatch) -> dict[str, Any]:
    if isinstance(patch, GenericPatch):
        return {"id": patch.id, "summary": patch.summary, "why": patch.why, "distribution": patch.applies_to,
                "versions": "the installed version", "files": "found by check (code.trust-remote-code)",
                "fixed_in": None, "consent": patch.needs_consent, "generic": True}
    return {"id": patch.id, "summary": patch.summary, "why": patch.why, "distribution": patch.distribution,
            "versions": patch.versions, "files": list(patch.files), "fixed_in": patch.fixed_in,
            "consent": patch.needs_consent, "generic": False}


def render_patch_list(patches: Sequence[Patch | GenericPatch], fmt: str) -> str:
    rows = [patch_row(p) for p in patches]
    if fmt == "json":
        return dump_json("patches list", 0, {"patches": rows})
    if fmt == "junit":
        return _junit("patches list", [row["id"] for row in rows])
    width = max((len(row["id"]) for row in rows), default=10)
    lines = []
    for row in rows:
        where = row["distribution"] if row["generic"] else f"{row['distribution']}{row['versions']}"
        lines.append(f"{row['id']:<{width}}  {where}  {row['summary']}")
    return "\n".join(lines) + "\n"


def render_patch(patch: Patch | GenericPatch, fmt: str) -> str:
    row = patch_row(patch)
    if fmt == "json":
        return dump_json("patches show", 0, {"patch": row})
    if fmt == "junit":
        return _junit("patches show", [row["id"]])
    files = row["files"] if isinstance(row["files"], str) else ", ".join(row["files"])
    shown = [
        ("id", row["id"]), ("summary", row["summary"]), ("why", row["why"]),
        ("distribution", row["distribution"]), ("versions", row["versions"]), ("files", files),
        ("fixed_in", row["fixed_in"] or "unknown"),
        ("consent", "needs --trust-remote-code" if row["consent"] else "not needed"),
    ]
    return "".join(f"{name + ':':<14}{value}\n" for name, value in shown)


def _junit(command: str, names: Sequence[str]) -> str:
    """A listing as JUnit: one passing test case per item (so every format works everywhere)."""
    root = ET.Element("testsuites", name=f"envdoctor {command}", tests=str(len(names)))
    suite = ET.SubElement(root, "testsuite", name=command, tests=str(len(names)), failures="0")
    for name in names:
        ET.SubElement(suite, "testcase", classname=command, name=name)
    return ET.tostring(root, encoding="unicode") + "\n"

