"""Quoting against a real sh: whatever the arguments, the command that reaches the host gets them
byte for byte (moved here from the unit tier, which starts no process)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from envdoctor.install.index_credentials import wrapped_command
from envdoctor.transport.interface import shell_join
from tests.unit.test_properties import ARG_TEXT


@pytest.mark.parametrize("arg", ["plain", "with space", "$(touch x)", "a'b", 'a"b', "semi;colon", "new\nline", "", "`id`"])
def test_shell_join_round_trips_through_a_real_shell(arg):
    """Every argument reaches the command byte for byte through sh."""
    out = subprocess.run(["sh", "-c", shell_join(["printf", "%s", arg])], capture_output=True, text=True)
    assert out.stdout == arg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ARG_TEXT, max_size=6))
@example(["$(touch PWNED)", "`id`", "a b", "'", '"', "\n", ";", "&&", "|", "*", "~", "-n", "", "\\"])
def test_shell_join_round_trips_through_a_real_sh(args):
    """Whatever the arguments, sh -c on shell_join's output passes exactly those arguments on."""
    command = shell_join(["printf", "%s\\0", *args])
    out = subprocess.run(["sh", "-c", command], capture_output=True, check=True).stdout
    received = out.split(b"\0")[:-1] if args else []
    if not args:  # printf with a format and no argument prints one empty field
        assert out == b"\0"
        return
    assert [r.decode("utf-8") for r in received] == args


def test_wrapped_pip_command_really_gets_the_variables(tmp_path):
    """The sh wrapper exports what arrives on stdin and execs the command (a real sh)."""
    command, stdin = wrapped_command([sys.executable, "-m", "pip", "--index-url", "http://u:p@h/s", "x"])
    command[command.index(sys.executable):] = [sys.executable, "-c",
                                               "import os; print(os.environ['PIP_INDEX_URL'])"]
    out = subprocess.run(command, input=stdin, capture_output=True, check=True).stdout
    assert out.decode().strip() == "http://u:p@h/s"
