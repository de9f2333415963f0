"""The drift report's JSON shape, the stage entry parser, and call-shape checking."""

from __future__ import annotations

import json

from envdoctor.drift.judge import ERROR, Finding, PairReport, remedy_for
from envdoctor.drift.request import entry_of_command
from envdoctor.operations.drift import DriftReport, HostDrift
from envdoctor.drift.signature import call_problems
from envdoctor.report.drift_report import render


def test_entry_of_a_stage_command() -> None:
    """-m module, -mmodule and a script path are entries; a command with neither has none."""
    assert entry_of_command("{python} -m sglang.launch_server --model-path {model}") == "sglang.launch_server"
    assert entry_of_command("{python} -mspeculators.train") == "speculators.train"
    assert entry_of_command("{python} /root/jobs/gen_data.py --n 3") == "/root/jobs/gen_data.py"
    assert entry_of_command("torchrun --nproc 8 train") is None
    assert entry_of_command("'unclosed") is None


def test_call_problems_cover_positional_keywords_and_unpacking() -> None:
    """Too many positionals, unknown keywords and missing required ones; * and ** relax what they may fill."""
    sig = {"p": [["self", 0, "pk"], ["a", 0, "pk"], ["b", 1, "pk"], ["c", 0, "k"]], "va": False, "kw": False}
    assert call_problems(sig, {"n": 2, "kw": ["c"]}, drop_first=True) == []
    assert len(call_problems(sig, {"n": 3, "kw": ["c"]}, drop_first=True)) == 1
    assert call_problems(sig, {"n": 1, "kw": []}, drop_first=True) == ["misses the required argument c"]
    assert call_problems(sig, {"n": 0, "kw": [], "dstar": True}, drop_first=True) == []
    assert call_problems({**sig, "kw": True}, {"n": 1, "kw": ["c", "zzz"]}, drop_first=True) == []


def test_json_report_groups_findings_by_pair_inside_the_envelope() -> None:
    """JSON: schema, command, exit_status, and pairs with consumer/provider versions and findings."""
    finding = Finding("spec/gen.py", 148, "Scheduler(…)", ERROR, "misses block_size", "vllm/sched.py:64")
    pair = PairReport("speculators", "0.3.0", "vllm", "0.16.0", (finding,), 43, "install vllm==0.11.0")
    report = DriftReport((HostDrift("ct200", "root@h", (pair,), stats={"cache": "miss"}),))
    doc = json.loads(render(report, "json"))
    assert (doc["schema"], doc["command"], doc["exit_status"]) == (1, "drift", 1)
    assert doc["pairs"][0]["consumer_version"] == "0.3.0" and doc["pairs"][0]["provider_version"] == "0.16.0"
    assert doc["pairs"][0]["findings"] == [{"path": "spec/gen.py", "line": 148, "use": "Scheduler(…)",
                                           "severity": "error", "why": "misses block_size",
                                           "definition": "vllm/sched.py:64"}]
    text = render(report, "text")
    assert "speculators 0.3.0 → vllm 0.16.0: 1 error" in text and "spec/gen.py:148" in text
    assert "<failure" in render(report, "junit")


def test_remedy_names_the_pin_of_an_extra_and_otherwise_an_upgrade() -> None:
    """A Requires-Dist pin (even under an extra) that excludes the installed version is the by-hand fix."""
    consumer = {"name": "speculators", "version": "0.3.0", "requires": ['vllm==0.11.0; extra == "datagen"']}
    text = remedy_for(consumer, "vllm", "0.16.0", "/root/my venv/bin/python")
    assert "[datagen]" in text and "'/root/my venv/bin/python' -m pip install 'vllm==0.11.0'" in text
    assert remedy_for({**consumer, "requires": []}, "vllm", "0.16.0").startswith("upgrade speculators")
