"""Report formats: the JSON contract, JUnit structure, doctor-style text."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from envdoctor.operations.fleet import Action, FleetReport, HostReport
from envdoctor.inventory import HostSpec
from envdoctor.report import render
from envdoctor.engine.results import CheckResult, Remedy, Status
from envdoctor.transport.ssh import SSHTarget

RESULTS = [
    CheckResult("host.reachable", Status.PASS, "logged in"),
    CheckResult("packages.required", Status.FAIL, "tiktoken is missing", why="the job imports it",
                remedy=Remedy("install", ("/v/bin/python", "-m", "pip", "install", "tiktoken"))),
    CheckResult("host.gpu", Status.SKIPPED, "no nvidia-smi"),
    CheckResult("python.pip-path", Status.BLOCKED, "not run", blocked_by="python.venv"),
]


def report() -> FleetReport:
    return FleetReport("check", [
        HostReport(HostSpec("ct200", SSHTarget("ct200"), venv="/v"), RESULTS),
        HostReport(HostSpec("b300", SSHTarget("b300")), RESULTS[:1]),
    ])


def test_json_follows_the_contract():
    """JSON has hosts -> results with id, status, message, and the fix command."""
    data = json.loads(render(report(), "json"))
    assert data["exit_status"] == 1
    first = data["hosts"][0]
    assert first["host"] == "ct200" and first["ok"] is False
    assert [r["status"] for r in first["results"]] == ["pass", "fail", "skipped", "blocked"]
    assert first["results"][1]["fix"] == "/v/bin/python -m pip install tiktoken"
    assert first["results"][3]["blocked_by"] == "python.venv"
    assert data["hosts"][1]["ok"] is True


def test_junit_has_one_case_per_host_and_check():
    """JUnit: a suite per host, a case per check, failures for fail/blocked, skipped for skipped."""
    root = ET.fromstring(render(report(), "junit").split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["ct200", "b300"]
    assert suites[0].get("tests") == "4" and suites[0].get("failures") == "2" and suites[0].get("skipped") == "1"
    failure = suites[0].find("testcase[@name='packages.required']/failure")
    assert "pip install tiktoken" in failure.text


def test_text_shows_what_why_and_fix():
    """The text report gives each problem's message, why it matters and the exact command."""
    text = render(report(), "text")
    assert "ct200" in text and "PROBLEMS" in text
    assert "tiktoken is missing" in text
    assert "why: the job imports it" in text
    assert "fix: /v/bin/python -m pip install tiktoken" in text
    assert "1 with problems (ct200)" in text


def test_fix_report_lists_actions_and_failed_output():
    """A fix report shows each command run and the tail of a failed one's output."""
    host = HostReport(HostSpec("ct200", None), RESULTS[:1], before=RESULTS,
                      actions=[Action("packages.required", "install", "pip install x", 1, "ERROR: no matching distribution")])
    text = render(FleetReport("fix", [host]), "text")
    assert "✗ pip install x" in text and "exit status 1" in text
    assert "no matching distribution" in text
    assert FleetReport("fix", [host]).exit_status == 1


@pytest.mark.parametrize("config", [None, "/srv/my config/envdoctor.toml", '/tmp/é"x\n'])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_config_is_the_envelope_key_after_exit_status(config, sort_keys):
    """dump_json(config=...) writes "config" right after "exit_status", before the body, whatever
    the body holds; without config= there is no such key."""
    from envdoctor.report.envelope import dump_json

    body = {"hosts": [{"host": "h", "results": [{"id": "x", "status": "pass", "message": "a\n  \"config\": b"}]}],
            "answer": 42}
    data = json.loads(dump_json("check", 0, body, sort_keys=sort_keys, config=config))
    assert list(data) == ["schema", "envdoctor", "command", "exit_status", "config",
                          *(sorted(body) if sort_keys else body)]
    assert data["config"] == config
    assert "config" not in json.loads(dump_json("check", 0, body, sort_keys=sort_keys))
    with pytest.raises(ValueError):
        dump_json("check", 0, {"config": "/elsewhere"}, config=config)


def test_facts_text_shows_the_problem_before_the_missing_facts():
    """A model folder that does not exist: the problem comes right after host, python and model,
    not below forty lines of dashes; the JSON is unchanged and exits 1."""
    from envdoctor.report.facts_report import render_facts

    doc = {"host": "gpu1", "python": "/v/bin/python", "model": "/m/nope", "hidden_size": None,
           "problems": ["/m/nope: no such directory"], "dflash": {"draft_layers": 5}}
    lines = render_facts(doc, "text").splitlines()
    assert lines[:4] == ["host: gpu1", "python: /v/bin/python", "model: /m/nope", "problem: /m/nope: no such directory"]
    assert lines[4:] == ["hidden_size: -", "dflash.draft_layers: 5"]
    assert json.loads(render_facts(doc, "json"))["exit_status"] == 1
