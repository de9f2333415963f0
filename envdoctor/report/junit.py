"""``--format junit``: one test suite per host, one test case per check."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from envdoctor.engine.results import Status
from envdoctor.operations.fleet import FleetReport
from envdoctor.safe_text import xml_safe


def render(report: FleetReport) -> str:
    root = ET.Element("testsuites", name=f"envdoctor {report.command}")
    total = failures = errors = skips = 0
    for host in report.hosts:
        suite = ET.SubElement(root, "testsuite", name=host.spec.name)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for result in host.results:
            case = ET.SubElement(suite, "testcase", classname=host.spec.name, name=result.id)
            counts["tests"] += 1
            detail = result.message
            if result.remedy is not None:
                detail += f"\nfix: {result.remedy.display}"
            if result.status in (Status.FAIL, Status.BLOCKED):
                ET.SubElement(case, "failure", message=result.message, type=str(result.status)).text = detail
                counts["failures"] += 1
            elif result.status is Status.ERROR:
                ET.SubElement(case, "error", message=result.message, type="error").text = detail
                counts["errors"] += 1
            elif result.status in (Status.SKIPPED, Status.WAIVED):
                ET.SubElement(case, "skipped", message=result.message)
                counts["skipped"] += 1
            else:
                ET.SubElement(case, "system-out").text = f"{result.status}: {detail}"
        for action in host.actions:
            case = ET.SubElement(suite, "testcase", classname=f"{host.spec.name}.fix", name=action.command)
            counts["tests"] += 1
            if not action.ok:
                message = f"not run, fix by hand: {action.refused}" if action.refused else f"exit status {action.exit_status}"
                ET.SubElement(case, "failure", message=message).text = "\n".join([*action.plan, action.output]).strip()
                counts["failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
        total += counts["tests"]
        failures += counts["failures"]
        errors += counts["errors"]
        skips += counts["skipped"]
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("skipped", str(skips))
    ET.indent(root)
    # A model's string may hold characters XML forbids (ElementTree writes them as they are).
    return '<?xml version="1.0" encoding="utf-8"?>\n' + xml_safe(ET.tostring(root, encoding="unicode")) + "\n"
