"""The tests' CLI fork server (tests/cli_server.py) launches `envdoctor` as a fresh interpreter would."""

from __future__ import annotations

import os
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
    children = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False)
    assert children.stdout == ""


def test_start_up_variables_send_a_launch_to_a_fresh_interpreter() -> None:
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    assert can_serve({**base, "HOME": "/elsewhere", "PYTHONDONTWRITEBYTECODE": "1"}, base)
    assert not can_serve({**base, "PYTHONPATH": "/x"}, base)
    assert not can_serve({**base, "LC_ALL": "C"}, base)
    assert not can_serve({"PATH": "/usr/bin"}, base)
