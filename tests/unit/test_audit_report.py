"""The audit's reports: JSON as the contract says, text grouped by distribution, JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from envdoctor.audit.records import AuditedFile, AuditReport, FileState, HostAudit
from envdoctor.report.audit_report import render


def report() -> AuditReport:
    files = (
        AuditedFile("/v/site/six.py", "six", FileState.PATCHED, "as the ledger recorded it", patches=("p1",)),
        AuditedFile("/v/site/idna/core.py", "idna", FileState.MODIFIED, "content differs"),
        AuditedFile("/v/site/idna/caf\udce9.py", "idna", FileState.EXTRA, "no RECORD lists it"),
    )
    good = HostAudit("gpu-a", "root@gpu-a", prefix="/v", python="/v/bin/python", files=files[:1])
    bad = HostAudit("gpu-b", "root@gpu-b", prefix="/v", python="/v/bin/python", files=files)
    down = HostAudit("gpu-c", "root@gpu-c", problem="connection refused", hint="check the host")
    return AuditReport((good, bad, down))


def test_json_contract_files_with_path_distribution_state():
    """Each host has a list of files with path, distribution and state; non-UTF-8 bytes travel in base64."""
    data = json.loads(render(report(), "json"))
    assert data["exit_status"] == 1
    good, bad, down = data["hosts"]
    assert good["ok"] is True and good["files"] == [
        {"path": "/v/site/six.py", "distribution": "six", "state": "patched",
         "reason": "as the ledger recorded it", "patches": ["p1"]}]
    assert [f["state"] for f in bad["files"]] == ["patched", "modified", "extra"]
    assert bad["files"][2]["path"] == "/v/site/idna/caf\\xe9.py" and bad["files"][2]["path_bytes_b64"]
    assert down["ok"] is False and down["error"] == "connection refused"


def test_only_patched_files_is_exit_0():
    """A host whose only differences are recorded patches passes."""
    assert AuditReport(report().hosts[:1]).exit_status == 0


def test_text_groups_by_distribution_and_junit_fails_per_distribution():
    """Text lists differences under their distribution; JUnit fails the distribution's case and the unreachable host."""
    text = render(report(), "text")
    assert "idna: 1 extra, 1 modified" in text and "gpu-c  root@gpu-c  ERROR" in text
    root = ET.fromstring(render(report(), "junit").split("\n", 1)[1])
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["gpu-a"].get("failures") == "0"
    assert [c.get("name") for c in suites["gpu-b"].iter("testcase")] == ["idna"]
    assert suites["gpu-c"].get("errors") == "1"
