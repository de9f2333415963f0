"""The unit tier's guard refuses processes here (and only here: tests/oracle/test_shell_quoting_as_sh.py
runs a real sh in the same session)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.conftest import ProcessInUnitTier


def test_a_subprocess_in_a_unit_test_fails_naming_the_command():
    with pytest.raises(ProcessInUnitTier, match="move it to tests/oracle or tests/e2e") as caught:
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    assert sys.executable in str(caught.value)


def test_fork_and_system_are_refused_too():
    with pytest.raises(ProcessInUnitTier):
        os.fork()
    with pytest.raises(ProcessInUnitTier):
        os.system("true")
