"""The tests' CLI fork server (tests/cli_server.py) launches `envdoctor` as a fresh interpreter would."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_server import CLIServer, can_serve

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    served = CLIServer(str(tmp_path_factory.mktemp("server")), dict(os.environ), str(REPOSITORY))
    yield served
    served.stop()


def fresh(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "envdoctor", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_served_launch_is_what_a_fresh_one_prints(server: CLIServer, tmp_path: Path) -> None:
    """Same status, stdout and stderr, with the launch's own environment, working folder and argv."""
    (tmp_path / "relative_config").write_text("Host a\n  HostName 10.1.2.3\nHost b\n  Port 2222\n")
    no_ssh = tmp_path / "bin"
    no_ssh.mkdir()
    with_ssh = {**os.environ, "ENVDOCTOR_SSH_G_CACHE": "off"}
    without_ssh = {**with_ssh, "PATH": str(no_ssh)}  # the built-in resolver answers
    for env in (with_ssh, without_ssh):
        for args in (["--version"], ["hosts", "a", "--ssh-config", "relative_config"],
                     ["hosts", "a", "b", "--ssh-config", "relative_config", "--format", "json"],
                     ["hosts", "a", "--ssh-config", "missing"], ["check", "no-such-host"], ["fix", "--bogus"]):
            served = server.run(args, env=env, cwd=str(tmp_path), timeout=120)
            assert served == fresh(args, env, tmp_path), args
    text = server.run(["hosts", "a", "--ssh-config", "relative_config"], env=without_ssh, cwd=str(tmp_path),
                      timeout=120)[1]
    assert "10.1.2.3" in text and "resolved by built-in" in text


def test_a_launch_past_its_timeout_is_killed(server: CLIServer, tmp_path: Path) -> None:
    """TimeoutExpired as subprocess.run raises it, and the launch's process is gone."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never says a word
    with silent:
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            server.run(["check", f"127.0.0.1:{port}", "--accept-new"], env=dict(os.environ), cwd=str(tmp_path),
                       timeout=2)
        assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert children_of(server.process.pid) == []


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (read from /proc: no procps needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_each_launch_marks_what_it_starts_with_its_own_run_id(server: CLIServer, tmp_path: Path) -> None:
    """The run id envdoctor makes at import is the launch's ENVDOCTOR_RUN_ID, else a new one per
    launch (never the server's): tests find a run's processes on the host by it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    real = shutil.which("python3")
    assert real
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "$ENVDOCTOR_RUN_ID" >> {shlex.quote(str(seen))}\n'
                                     f'exec {shlex.quote(real)} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    args = ["check", "local", "--only", "host.python", "--format", "json"]
    server.run(args, env={**env, "ENVDOCTOR_RUN_ID": "given-run-id"}, cwd=str(tmp_path), timeout=120)
    server.run(args, env=env, cwd=str(tmp_path), timeout=120)
    server.run(args, env=env, cwd=str(tmp_path), timeout=120)
    ids = list(dict.fromkeys(seen.read_text().split()))
    assert len(ids) == 3 and ids[0] == "given-run-id", ids


def test_start_up_variables_send_a_launch_to_a_fresh_interpreter() -> None:
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    assert can_serve({**base, "HOME": "/elsewhere", "PYTHONDONTWRITEBYTECODE": "1"}, base)
    assert not can_serve({**base, "PYTHONPATH": "/x"}, base)
    assert not can_serve({**base, "LC_ALL": "C"}, base)
    assert not can_serve({"PATH": "/usr/bin"}, base)
