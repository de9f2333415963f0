"""Every command on the real stacks, judged as a user would: every check finishes and says
something true, `fix` on a consistent stack changes nothing, stderr carries only envdoctor's own
words. Times are measured by bench/real_stack_bench.py, not asserted here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import uv_executable

STACKS = ["vllm_stack", "sglang_stack"]


def _report(result) -> dict:
    assert result.stdout, result.stderr[-2000:]
    return json.loads(result.stdout)


def _freeze(venv: Path) -> str:
    return subprocess.run([uv_executable(), "pip", "freeze", "--python", str(venv / "bin" / "python")],
                          capture_output=True, text=True, check=True, timeout=300).stdout


@pytest.mark.parametrize("stack", STACKS)
def test_every_check_finishes_on_the_stack(stack, request, run_cli, tmp_path):
    """`check local --venv V` answers every check: none blocked, none cut by the deadline, the
    probe finished, and nothing but envdoctor's own log on stderr."""
    venv = request.getfixturevalue(stack)
    result = run_cli("check", "local", "--venv", str(venv), "--format", "json", "--timeout", "300",
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=420)
    host = _report(result)["hosts"][0]
    statuses = {r["id"]: r["status"] for r in host["results"]}
    assert "blocked" not in statuses.values(), [r for r in host["results"] if r["status"] == "blocked"]
    unfinished = [r for r in host["results"] if "deadline" in r.get("message", "")]
    assert not unfinished, unfinished
    assert statuses["host.python"] == "pass" and statuses["python.venv"] == "pass"
    assert statuses.get("host.probe") == "pass", [r for r in host["results"] if r["id"] == "host.probe"]
    assert "Warning" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("stack", STACKS)
def test_fix_on_a_consistent_stack_changes_nothing(stack, request, run_cli, tmp_path):
    """`fix local --venv V` on the stack as uv installed it installs and patches nothing."""
    venv = request.getfixturevalue(stack)
    before = _freeze(venv)
    result = run_cli("fix", "local", "--venv", str(venv), "--format", "json", "--timeout", "300",
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=420)
    host = _report(result)["hosts"][0]
    ran = [a for a in host.get("actions", []) if a["exit_status"] is not None and not a.get("refused")]
    assert not ran, ran
    assert _freeze(venv) == before
    # (an audit's cache may be there: it lives in <venv>/.envdoctor by design; a change would not)
    written = sorted(p.name for p in (venv / ".envdoctor").glob("*") if not p.name.startswith((".audit", "audit-")))
    assert not written, f"fix wrote {written} into the stack (a ledger, a backup)"
