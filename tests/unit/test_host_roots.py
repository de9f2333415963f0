"""The lock that keeps /opt plants of one e2e test out of the others' discovery (tests/host_roots.py)."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from tests import host_roots


@pytest.fixture()
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The lock files in a folder of this test's own (the real ones are shared by every run)."""
    monkeypatch.setattr(host_roots, "_LOCKS", tmp_path)
    return tmp_path


def main_lock_state(locks: Path) -> str:
    """'free', 'shared' or 'exclusive': what a second open file description may take of the main lock."""
    fd = os.open(locks / f"envdoctor-tests-host-roots-{os.getuid()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "free"
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return "shared"
        except BlockingIOError:
            return "exclusive"
    finally:
        os.close(fd)


def test_shared_then_exclusive_in_one_test_upgrades_and_goes_back(locks: Path) -> None:
    """A test holding the roots shared that plants takes them exclusively (no wait for itself), then shared again."""
    states = []

    def body() -> None:
        with host_roots.shared():
            states.append(main_lock_state(locks))
            with host_roots.exclusive():
                states.append(main_lock_state(locks))
                with host_roots.shared():  # a nested hold while planting is the plant's own
                    states.append(main_lock_state(locks))
            states.append(main_lock_state(locks))
        states.append(main_lock_state(locks))

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the lock waited for its own holder"
    assert states == ["shared", "exclusive", "exclusive", "shared", "free"]


def test_stale_plants_of_gone_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """/opt/envdoctor-e2e-<kind>-<pid> of a process that is gone goes; this process's own and other names stay."""
    gone_pid = 2 ** 22 + 1  # above the kernel's pid_max (4194304): never a live process
    stale = tmp_path / f"envdoctor-e2e-planted-{gone_pid}"
    (stale / "venv").mkdir(parents=True)
    mine = tmp_path / f"envdoctor-e2e-choice-{os.getpid()}"
    mine.mkdir()
    other = tmp_path / "envdoctor-e2e-notes"
    other.mkdir()
    assert host_roots.remove_stale_plants(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])


def test_plant_folder_names_this_process() -> None:
    assert host_roots.plant_folder("drift") == Path(f"/opt/envdoctor-e2e-drift-{os.getpid()}")
