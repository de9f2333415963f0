"""envdoctor merge: per-node JSON reports folded into one fleet report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.errors import UsageError
from envdoctor.report.merge import common_outcomes, group_hosts, merge_reports


def node_report(results: list[tuple[str, str]], host: str = "local") -> dict:
    return {
        "schema": 1,
        "command": "check",
        "exit_status": 1 if any(s == "fail" for _, s in results) else 0,
        "hosts": [{
            "host": host,
            "destination": "this machine",
            "ok": not any(s == "fail" for _, s in results),
            "results": [{"id": i, "status": s, "message": f"{i} is {s}", "title": i} for i, s in results],
        }],
    }


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def envdoctor(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envdoctor", *args], capture_output=True, text=True,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=120)


def test_nodes_are_grouped_by_what_differs(tmp_path: Path) -> None:
    """Healthy nodes form one group; nodes with the same failure another; shared outcomes are set apart."""
    healthy = [("host.reachable", "pass"), ("host.gpu", "skipped")]
    broken = [("host.reachable", "pass"), ("host.gpu", "skipped"), ("packages.required", "fail")]
    paths = [write(tmp_path, f"node{i:02}.json", node_report(broken if i in (3, 7) else healthy)) for i in range(10)]
    report = merge_reports(paths)
    assert [h.spec.name for h in report.hosts] == [f"node{i:02}" for i in range(10)]
    assert report.exit_status == 1
    assert [str(o) for o in common_outcomes(report.hosts)] == ["host.gpu skipped"]
    groups = group_hosts(report.hosts)
    assert [(len(g.hosts), [str(o) for o in g.differs]) for g in groups] == [
        (8, []), (2, ["packages.required fail"])]
    assert groups[1].hosts == ("node03", "node07")


def test_named_hosts_keep_their_names_and_duplicates_are_refused(tmp_path: Path) -> None:
    """A report of named hosts keeps the names; the same host in two files is a usage error."""
    a = write(tmp_path, "a.json", node_report([("host.reachable", "pass")], host="gpu-1"))
    b = write(tmp_path, "b.json", node_report([("host.reachable", "pass")], host="gpu-1"))
    assert [h.spec.name for h in merge_reports([a]).hosts] == ["gpu-1"]
    with pytest.raises(UsageError, match="gpu-1 is in both"):
        merge_reports([a, b])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1", "is not JSON"),
        ("[" * 100_000, "not JSON|nested too deeply"),
        ('{"results": []}', "no \"hosts\" list"),
        ('{"hosts": [{"host": "x", "results": [{"id": "a", "status": "sideways"}]}]}', "unknown status"),
        ('{"hosts": [{"results": []}]}', "without a \"host\""),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_a_file_that_is_not_a_report_is_a_usage_error(tmp_path: Path, content: str | bytes, message: str) -> None:
    """Broken or hostile report files are named in a one-line error, never a traceback."""
    path = tmp_path / "node.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UsageError, match=message):
        merge_reports([path])


def test_merge_of_real_reports_through_the_cli(tmp_path: Path) -> None:
    """Reports written by `check local --format json` merge into text, JSON and JUnit; exit 1 on a problem."""
    first = envdoctor("check", "local", "--only", "host.python", "--format", "json",
                      "--output", str(tmp_path / "n1.json"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    data = json.loads((tmp_path / "n1.json").read_text())
    data["hosts"][0]["results"][0]["status"] = "fail"
    (tmp_path / "n2.json").write_text(json.dumps(data))

    as_json = envdoctor("merge", "n1.json", "n2.json", "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 1, as_json.stderr
    merged = json.loads(as_json.stdout)
    assert merged["schema"] == 1 and merged["exit_status"] == 1
    assert [h["host"] for h in merged["hosts"]] == ["n1", "n2"]
    assert [g["hosts"] for g in merged["groups"]] == [["n1"], ["n2"]]

    as_text = envdoctor("merge", "n1.json", "n2.json", cwd=tmp_path)
    assert "2 hosts in 2 group(s)" in as_text.stdout and as_text.returncode == 1

    as_junit = envdoctor("merge", "n1.json", "--format", "junit", cwd=tmp_path)
    assert as_junit.returncode == 0 and "<testsuite" in as_junit.stdout

    missing = envdoctor("merge", "absent.json", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
