"""A successful command over SSH writes nothing to stderr but envdoctor's own log lines.

A wrapper that reads stderr (a job's prolog, a CI step) takes anything there for trouble; the
newest releases of envdoctor's dependencies (asyncssh 2.24 with cryptography 51) printed ten
lines of DSA deprecation warnings on every command that opened a connection. The CLI runs here
as a fresh interpreter (never the tests' fork server, which has asyncssh imported already), so
what its imports print is on its stderr.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

#: A line envdoctor logs: structlog's console renderer, ``[level   ] event key=value ...``.
LOG_LINE = re.compile(r"\[(debug|info|warning|error|critical) *\] \S")


def test_a_successful_check_over_ssh_writes_only_envdoctors_log_lines(sshd, venv_factory, test_env):
    """check of a healthy venv over SSH, fresh interpreter, -v: exit 0, stderr only log lines."""
    venv = venv_factory("quiet", ["packaging"])
    args = ["check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
            "--require", "packaging", "--format", "json"]
    for verbosity in ([], ["-v"]):
        proc = subprocess.run([sys.executable, "-m", "envdoctor", *verbosity, *args], capture_output=True,
                              text=True, env=test_env, timeout=300, stdin=subprocess.DEVNULL, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results = {r["id"]: r["status"] for r in json.loads(proc.stdout)["hosts"][0]["results"]}
        assert results["host.reachable"] == "pass" and results["packages.required"] == "pass", results
        foreign = [line for line in proc.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]
        assert foreign == [], proc.stderr
    assert LOG_LINE.search(proc.stderr), "with -v, envdoctor logs (so the test can tell its lines apart)"
