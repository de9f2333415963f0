"""The processes of one envdoctor run on this machine, found by the run's marker.

Every command a run starts on a host that must end with it (the probe, pip, the patch
writer) carries ENVDOCTOR_RUN_ID in its environment, and so does everything it starts; a
test sets the id (envdoctor takes it from its own environment) and reads /proc for it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def processes_of(run_id: str) -> dict[int, str]:
    """pid -> command line of each live process whose environment holds ENVDOCTOR_RUN_ID=run_id."""
    wanted = f"ENVDOCTOR_RUN_ID={run_id}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                continue  # ended, not yet reaped by its parent
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found


def wait_for(run_id: str, match: str, timeout: float) -> dict[int, str]:
    """The run's processes once one of them has `match` in its command line (polled)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        found = processes_of(run_id)
        if any(match in line for line in found.values()):
            return found
        time.sleep(0.05)  # a poll interval
    raise AssertionError(f"no process of run {run_id} ran {match!r} within {timeout:g}s: {processes_of(run_id)}")


def gone_within(run_id: str, seconds: float) -> dict[int, str]:
    """The run's processes still alive after `seconds` (polled: empty as soon as none is left)."""
    until = time.monotonic() + seconds
    while True:
        left = processes_of(run_id)
        if not left or time.monotonic() >= until:
            return left
        time.sleep(0.05)


def unique_run_id(label: str) -> str:
    return f"test-{label}-{os.getpid()}-{os.urandom(4).hex()}"
