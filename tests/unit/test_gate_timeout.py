"""A host's `timed_out`: envdoctor's own deadline stopped the work (the host did not finish in
time, or the probe stopped at its deadline), as opposed to a probe that died or a failing check."""

from __future__ import annotations

import json

from envdoctor.engine.facts import HostFacts, Problem
from envdoctor.engine.graph import load_checks
from envdoctor.inventory import HostSpec
from envdoctor.operations.fleet import FleetReport, HostReport
from envdoctor.probe.program import _ended_early, parse_lines
from envdoctor.report import render
from envdoctor.transport.interface import CommandResult
from tests.unit.fakes import facts

GRAPH = load_checks()
SPEC = HostSpec("local", None)


def host_json(host_facts: HostFacts) -> dict:
    report = FleetReport("check", [HostReport(SPEC, GRAPH.evaluate(SPEC, host_facts))])
    return json.loads(render(report, "json"))["hosts"][0]


def test_a_probe_stopped_at_its_deadline_is_timed_out():
    """The end record lists unfinished sections: the host is timed_out, and host.probe says so."""
    from envdoctor.probe.host import core

    stopped = parse_lines([b'{"section": "host", "data": {}}', json.dumps(core.end_record(["drift"])).encode()])
    host = facts()
    host.probe.unfinished[:] = stopped.unfinished
    assert stopped.complete and stopped.unfinished == ["drift"]
    data = host_json(host)
    assert data["timed_out"] is True
    probe = next(r for r in data["results"] if r["id"] == "host.probe")
    assert probe["status"] == "warn" and probe["details"]["deadline"] is True


def test_a_host_that_did_not_finish_in_time_is_timed_out():
    """--timeout passed before the host answered (host.reachable error of kind timeout)."""
    data = host_json(HostFacts.unavailable(Problem("timeout", "local did not finish within 3s")))
    assert data["timed_out"] is True and data["ok"] is False


def test_a_probe_that_died_or_a_host_that_refused_is_not_timed_out():
    """A probe killed before its end record, an unreachable host and a clean run are not timeouts."""
    killed = CommandResult(argv=("sh",), exit_status=-9, stdout=b"", stderr=b"")
    died = _ended_early(parse_lines([b'{"section": "host", "data": {}}']), ["host", "drift"], killed)
    host = facts()
    host.probe.unfinished[:] = died.unfinished
    host.probe.complete = died.complete
    assert host_json(host)["timed_out"] is False
    assert host_json(HostFacts.unavailable(Problem("unreachable", "refused")))["timed_out"] is False
    assert host_json(facts())["timed_out"] is False


def test_a_venv_the_probe_had_no_time_to_read_is_an_error_not_missing():
    """python.venv is `error` (could not look), not "does not exist" (a fail a gate drains on),
    when the probe's deadline stopped its venvs section."""
    host = facts()
    host.probe.errors["venvs"] = "did not finish: the probe's deadline of 3s passed"
    spec = HostSpec("local", None, venv="/opt/venvs/job")
    result = {r.id: r for r in GRAPH.evaluate(spec, host, only=["python.venv"])}["python.venv"]
    assert result.status == "error" and "deadline" in result.message
    assert {r.id: r for r in GRAPH.evaluate(spec, facts(), only=["python.venv"])}["python.venv"].status == "fail"
