"""Reports of `envdoctor revert`: text, json, junit (one test case per file)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from envdoctor.operations.revert import HostRevert
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json


def _text(results: Sequence[HostRevert]) -> str:
    lines = []
    for host in results:
        lines.append(f"{host.host}  {host.patch}  {'NOTHING TO DO' if host.note else 'OK' if host.ok else 'NOT REVERTED'}")
        if host.error:
            lines.append(f"  ✗ {host.error}")
            if host.hint:
                lines.append(f"    hint: {host.hint}")
        if host.note:
            lines.append(f"  - {host.note}")
        for item in host.files:
            lines.append(f"  {'✓' if item.ok else '✗'} {item.file}: {item.result} ({item.message})")
    return "\n".join(lines) + "\n"


def _junit(results: Sequence[HostRevert]) -> str:
    suites = ET.Element("testsuites", name="envdoctor revert")
    for host in results:
        cases = [(f.file, None if f.ok else f.message) for f in host.files] or [(host.patch, host.error)]
        suite = ET.SubElement(suites, "testsuite", name=host.host, tests=str(len(cases)),
                              failures=str(sum(1 for _, err in cases if err)))
        for name, error in cases:
            case = ET.SubElement(suite, "testcase", classname=f"{host.host}.{host.patch}", name=name)
            if error:
                ET.SubElement(case, "failure", message=error)
    return ET.tostring(suites, encoding="unicode") + "\n"


def render_revert(results: Sequence[HostRevert], fmt: str, *, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        exit_status = 0 if all(r.ok for r in results) else 1
        return dump_json("revert", exit_status, {"hosts": [r.to_json() for r in results]}, config=config)
    if fmt == "junit":
        return _junit(results)
    return _text(results)
