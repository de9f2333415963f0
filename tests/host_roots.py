"""The discovery roots of this machine (/opt/*/venv) as a resource the e2e tests share.

A few tests plant a venv under /opt to see discovery find it (or never start its python).
Every probe that runs on this machine while it is there sees it too, so when the tests run
in parallel (pytest-xdist workers) a planting test holds the roots exclusively and every
other e2e test holds them shared: a readers-writer lock made of two flock(2) files, with a
turnstile so that a waiting writer is not starved by a stream of readers.

The lock files are per user and per machine (like /opt itself), so separate pytest runs on
one machine also keep out of each other's way. A planted folder carries the planting
process's pid in its name; one left behind by a killed run is removed before the next plant.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PLANT_PREFIX = "envdoctor-e2e-"
_LOCKS = Path(tempfile.gettempdir())
_state = {"shared": None, "exclusive": False}  # this process's hold: the shared lock's fd, or exclusive


def _open(name: str) -> int:
    return os.open(_LOCKS / f"envdoctor-tests-{name}-{os.getuid()}.lock", os.O_RDWR | os.O_CREAT, 0o600)


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Hold the roots shared: no planting test runs meanwhile."""
    if _state["exclusive"] or _state["shared"] is not None:
        yield
        return
    turnstile, main = _open("turnstile"), _open("host-roots")
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(main, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        _state["shared"] = main
        yield
    finally:
        _state["shared"] = None
        os.close(main)
        os.close(turnstile)


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the roots alone (for planting under /opt); stale plants of dead runs go first.

    Called from a test that holds them shared, the shared hold is given up while waiting (a
    lock of this process's own must not wait for itself) and taken again afterwards."""
    if _state["exclusive"]:
        yield
        return
    own = _state["shared"]
    turnstile, main = _open("turnstile"), _open("host-roots")
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if own is not None:
            fcntl.flock(own, fcntl.LOCK_UN)
        fcntl.flock(main, fcntl.LOCK_EX)
        _state["exclusive"] = True
        remove_stale_plants()
        yield
    finally:
        _state["exclusive"] = False
        os.close(main)  # releases the exclusive hold
        if own is not None:
            fcntl.flock(own, fcntl.LOCK_SH)
        os.close(turnstile)


def plant_folder(kind: str) -> Path:
    """/opt/envdoctor-e2e-<kind>-<pid>: a discovery root of this process's own."""
    return Path("/opt") / f"{PLANT_PREFIX}{kind}-{os.getpid()}"


def remove_stale_plants(opt: Path = Path("/opt")) -> list[Path]:
    """Remove /opt/envdoctor-e2e-*-<pid> folders whose process is gone (a killed run's)."""
    removed = []
    for entry in opt.glob(f"{PLANT_PREFIX}*"):
        found = re.fullmatch(rf"{re.escape(PLANT_PREFIX)}[a-z-]+-(\d+)", entry.name)
        if found and not Path(f"/proc/{found[1]}").exists():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
