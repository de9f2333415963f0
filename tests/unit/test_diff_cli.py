"""`envdoctor diff` and `snapshot` refuse bad input with one line and exit 2, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def report(path: Path, hosts: list[dict]) -> str:
    path.write_text(json.dumps({"schema": 1, "command": "snapshot", "exit_status": 0, "hosts": hosts}))
    return str(path)


@pytest.mark.parametrize("args, message", [
    (("a.json", "n1"), "give hosts or REPORT.json files, not both"),
    (("missing.json",), "no report file missing.json"),
])
def test_reports_and_hosts_are_not_mixed_and_a_missing_report_is_named(tmp_path, monkeypatch, args, message):
    """diff a.json n1, or a report that is not there: exit 2 with the reason, no traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text("{}")
    result = invoke("diff", *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_host_options_with_reports_are_refused(tmp_path):
    """--venv says where a host's venv is; a report already says what its host has: exit 2."""
    path = report(tmp_path / "n1.json", [{"host": "local", "results": [], "have": {"items": {}}}])
    result = invoke("diff", path, "--venv", "/opt/venv")
    assert result.exit_code == 2 and "--venv applies to hosts" in result.output


def test_a_file_that_is_not_a_report_names_what_diff_reads(tmp_path):
    """A JSON file without hosts: exit 2, the hint names snapshot's JSON."""
    path = tmp_path / "other.json"
    path.write_text('{"not": "a report"}')
    result = invoke("diff", str(path))
    assert result.exit_code == 2 and "not an envdoctor JSON report" in result.output
    assert "envdoctor snapshot HOST --format json" in result.output


def test_reports_of_identical_nodes_exit_0_and_of_different_ones_exit_1(tmp_path):
    """Two nodes with the same items: exit 0; one with another torch: exit 1, that node named."""
    have = {"items": {"torch": "2.9.1"}, "known": []}
    a = report(tmp_path / "a.json", [{"host": "local", "results": [], "have": have}])
    b = report(tmp_path / "b.json", [{"host": "local", "results": [], "have": have}])
    assert invoke("diff", a, b).exit_code == 0
    c = report(tmp_path / "c.json", [{"host": "local", "results": [], "have": {"items": {"torch": "2.8.0"}}}])
    result = invoke("diff", a, b, c, "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.output)["differences"][0]["differs"] == [{"host": "c", "value": "2.8.0"}]
