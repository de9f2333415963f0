"""`envdoctor merge` reads only regular files, opened without blocking, within its byte limit: a
FIFO, a link to /dev/zero, a socket or a file over the limit is one clear line and exit 2,
at once (the run never waits on a FIFO nor reads a device without end)."""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.report import merge
from envdoctor.cli.main import cli

REPORT = {"schema": 1, "command": "check", "exit_status": 0,
          "hosts": [{"host": "local", "results": [{"id": "host.reachable", "status": "pass"}]}]}


def run_merge(*paths: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["merge", *map(str, paths), "--format", "json"])
    return result.exit_code, result.output


def unblock_later(fifo: Path, stop: threading.Event) -> threading.Thread:
    """Should merge block opening the FIFO (the failure this guards against), a writer opens
    and closes it after a few seconds, so the test fails instead of hanging."""

    def run() -> None:
        deadline = time.monotonic() + 5
        while not stop.wait(0.1):
            if time.monotonic() < deadline:
                continue
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # (no reader yet)
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    """A FIFO named like a report (among real reports): exit 2 naming it as a FIFO, at once."""
    good = tmp_path / "node1.json"
    good.write_text(json.dumps(REPORT))
    fifo = tmp_path / "node2.json"
    os.mkfifo(fifo)
    stop = threading.Event()
    thread = unblock_later(fifo, stop)
    try:
        started = time.monotonic()
        status, output = run_merge(good, fifo)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join()
    assert status == 2, output
    assert f"{fifo} is a FIFO" in output and "Traceback" not in output
    assert elapsed < 5, elapsed  # (the FIFO was never waited on)


@pytest.mark.parametrize("kind", ["socket", "directory-link"])
def test_other_files_that_are_not_regular_are_refused(tmp_path: Path, kind: str) -> None:
    """A socket, or a link to a folder, named like a report: exit 2, one line saying what it is."""
    path = tmp_path / "node.json"
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        want = "is a socket"
    else:
        (tmp_path / "folder").mkdir()
        path.symlink_to(tmp_path / "folder")
        want = "directory"  # (click itself refuses a folder for a REPORT.json argument)
    status, output = run_merge(path)
    assert status == 2 and want in output and "Traceback" not in output, output


def test_a_file_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A regular file larger than the limit: exit 2, read no further than the limit."""
    monkeypatch.setattr(merge, "MAX_REPORT_BYTES", 1000)
    path = tmp_path / "node.json"
    path.write_text(json.dumps({**REPORT, "pad": "x" * 2000}))
    status, output = run_merge(path)
    assert status == 2 and "too large" in output, output
    path.write_text(json.dumps(REPORT))
    assert run_merge(path)[0] == 0


def test_a_link_to_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    """`x.json -> /dev/zero`: exit 2 naming a character device. Run as its own process under a
    1 GiB address-space limit, so that reading without end fails there, not in this machine."""
    link = tmp_path / "node.json"
    link.symlink_to("/dev/zero")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run([sys.executable, "-m", "envdoctor", "merge", str(link)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr
    assert "is a character device" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2  # (the line, and at most its hint)
