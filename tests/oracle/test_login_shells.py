"""sshd runs a command as ``$SHELL -c LINE`` with the user's login shell, which may be tcsh or
fish rather than sh. The line envdoctor sends must reach sh unchanged in every one of them:
each shell installed here is the oracle (run exactly as sshd runs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from envdoctor.probe.program import PROBE_HELLO, build_program, encode_stdin, probe_command
from envdoctor.transport.ssh import BEGIN_MARK, _command_line, login_shell_line

SHELLS = ["sh", "dash", "bash", "zsh", "csh", "tcsh", "fish"]
#: Arguments that each layer could mangle: line ends (csh), ! (csh history), backslash
#: pairs (fish), $ and backquotes (sh), quotes, printf's %, bytes beyond ASCII, globs.
NASTY = ["a\nb", "back\\\\slash\\'q", "bang!x", "$HOME", "`id`", '"dq"', "it's", "100%d", "tab\there",
         "ünï ✓", "~/x", "*?[a]", "{a,b}", "a;b|c&d", "#hash", "", "trailing\n\n", "-n"]


def shell_or_skip(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (.ci/run installs tcsh, fish and zsh)")
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_arguments_and_environment_arrive_byte_exact(shell):
    path = shell_or_skip(shell)
    line = _command_line([sys.executable, "-c", "import json,os,sys;print(json.dumps([sys.argv[1:], os.environ['K']]))",
                          *NASTY], {"K": "v al!\n\\x"})
    proc = subprocess.run([path, "-c", line], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode("utf-8").splitlines()
    assert lines[0] == BEGIN_MARK.decode("ascii")
    assert json.loads(lines[-1]) == [NASTY, "v al!\n\\x"]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_line_sent_as_it_is_arrives_byte_exact(shell):
    """What is not wrapped (no line end, !, backslash) every shell reads as sh does."""
    path = shell_or_skip(shell)
    plain = ["ünï ✓", "$HOME", "`id`", "it's", "100%d", "#x", "~/x", "*?[a]", "{a,b}", "a;b|c&d", ""]
    line = _command_line([sys.executable, "-c", "import json,sys;print(json.dumps(sys.argv[1:]))", *plain], None)
    assert "printf" not in line
    proc = subprocess.run([path, "-c", line], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.decode("utf-8").splitlines()[-1]) == plain


@pytest.mark.parametrize("shell", SHELLS)
def test_the_probe_runs_under_every_login_shell(shell):
    """The probe's wrapper and bootstrap span lines: under tcsh they once ended in "Unmatched '"."""
    path = shell_or_skip(shell)
    line = _command_line(probe_command([sys.executable]), None)
    stdin = encode_stdin({"sections": {"host": {}}}, build_program(["host"]))
    proc = subprocess.run([path, "-c", line], input=stdin, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()[1:]  # (after the begin mark)
    assert lines[0] == PROBE_HELLO, lines[:2]  # the protocol's first line (transport/first_line.py)
    answers = [json.loads(ln) for ln in lines[1:]]
    answers = [a for a in answers if "program_code" not in a]  # (the bootstrap's note that it kept the program)
    assert answers[-1]["done"] is True and answers[0]["section"] == "host" and "data" in answers[0]


def test_a_line_every_shell_reads_alike_is_sent_as_it_is():
    """Only a line with something a login shell would read differently is wrapped."""
    plain = "'/venv/bin/python' -m pip install 'idna<3' 'a b'"
    assert login_shell_line(plain) == plain
    wrapped = login_shell_line("printf 'x\\n'")
    assert wrapped.startswith("sh -c 'eval ") and "\n" not in wrapped and "!" not in wrapped
