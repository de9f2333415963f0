"""The unit tier runs in-process: a test here that starts a process fails, naming it.

Tests that need a real tool (``ssh -G``, ``ssh-keygen``, pyenv, a shell, a venv's interpreter,
the probe run on this machine) belong in ``tests/oracle`` or ``tests/e2e``. The guard covers a
test's fixtures too (a module fixture that builds an ELF with g++ counts), and keeps such tests
from creeping back, which is what once made "unit" take minutes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


class ProcessInUnitTier(AssertionError):
    pass


def _refuse(what: str):
    def refuse(*args, **kwargs):
        shown = args[1] if what == "Popen" and len(args) > 1 else args[:1]
        raise ProcessInUnitTier(f"the unit tier runs in-process, and this test started a process ({what}: "
                                f"{shown!r}); move it to tests/oracle or tests/e2e")
    return refuse


UNIT = Path(__file__).resolve().parent

_GUARDED = [(subprocess.Popen, "_execute_child", "Popen")] + [
    (os, name, f"os.{name}") for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "system")
    if hasattr(os, name)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of each unit test, its fixtures' included, run with processes
    refused. (pytest calls this hook for every test of the run, so it looks at the folder.)"""
    if UNIT not in Path(item.path).resolve().parents:
        yield
        return
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _GUARDED]
    for owner, name, what in _GUARDED:
        setattr(owner, name, _refuse(what))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
