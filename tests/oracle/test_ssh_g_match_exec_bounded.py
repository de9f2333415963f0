"""`Match exec` commands cannot hold envdoctor past its `ssh -G` timeout: the whole process group
of ssh -G is killed at the deadline (the exec command too), and a command's background child
that keeps ssh's stderr open does not delay an answer ssh has already given. Real `ssh -G`
runs the commands; the timeout knob (openssh.SSH_G_TIMEOUT) is set to one second, and every
exec command ends on its own within 30 s, so a regression is slow but bounded."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.errors import ConfigError
from envdoctor.transport import openssh
from envdoctor.transport.target import SSHOptions, SSHTarget

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (the oracle)")


@pytest.fixture(autouse=True)
def one_second(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(openssh, "SSH_G_TIMEOUT", 1.0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie counts as gone: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def hanging_config(tmp_path: Path) -> tuple[Path, Path]:
    """A config whose Match exec writes its pid, then sleeps for 30 s (ssh waits for it)."""
    pid_file = tmp_path / "exec.pid"
    config = tmp_path / "config"
    config.write_text(f'Match host slow exec "echo $$ > {pid_file}; exec sleep 30"\n  Port 2222\n'
                      "Host slow\n  HostName 127.0.0.9\n")
    return config, pid_file


def wait_gone(pid: int, seconds: float = 3.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_hosts_returns_at_the_timeout_and_the_exec_command_is_killed(tmp_path: Path) -> None:
    """`envdoctor hosts` reports the timeout within about a second (not after the 30 s the
    command sleeps) and the exec command is no longer running."""
    config, pid_file = hanging_config(tmp_path)
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["hosts", "slow", "--ssh-config", str(config), "--format", "json"])
    elapsed = time.monotonic() - started
    assert result.exit_code == 2, result.output
    (entry,) = json.loads(result.stdout)["hosts"]
    assert "did not finish within 1s" in entry["error"]
    assert elapsed < 10, elapsed  # (30 s when the exec child's pipes are awaited)
    assert wait_gone(int(pid_file.read_text()))


def test_prefetch_kills_the_exec_command_too(tmp_path: Path) -> None:
    """The path every connecting command takes (resolve_all, plain processes) also kills the
    command at the deadline and reports the timeout once."""
    config, pid_file = hanging_config(tmp_path)
    with pytest.raises(ConfigError, match="did not finish within 1s"):
        openssh.resolve_all([SSHTarget("slow")], SSHOptions(config_files=(str(config),)))
    assert wait_gone(int(pid_file.read_text()))


def test_a_background_child_holding_stderr_does_not_delay_the_answer(tmp_path: Path) -> None:
    """ssh -G answers at once when the exec command leaves a child behind on ssh's stderr:
    envdoctor takes that answer (the one ssh -G gives) instead of waiting for the child and
    timing out, on both paths."""
    config = tmp_path / "config"
    config.write_text('Match host bg exec "sleep 20 & true"\n  Port 2201\nHost bg\n  HostName 127.0.0.8\n')
    oracle = subprocess.run(["ssh", "-G", "-F", str(config), "bg"], capture_output=False, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=60, check=True, text=True)
    want = dict(line.split(" ", 1) for line in oracle.stdout.splitlines() if " " in line)
    assert (want["hostname"], want["port"]) == ("127.0.0.8", "2201")
    result = CliRunner().invoke(cli, ["hosts", "bg", "--ssh-config", str(config), "--format", "json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["hosts"]
    assert (entry["hostname"], str(entry["port"])) == (want["hostname"], want["port"])
    resolver = openssh.HostResolver(str(config))
    resolver.prefetch([("bg", None, None)])
    assert resolver._done[("bg", None, None)].port == 2201


def test_a_cancelled_resolve_kills_the_exec_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolve cancelled before the ssh -G timeout (Ctrl-C, a fleet deadline) ends ssh -G and
    its Match exec command at once, and the run is not held until the timeout."""
    import asyncio

    monkeypatch.setattr(openssh, "SSH_G_TIMEOUT", 30.0)
    config, pid_file = hanging_config(tmp_path)
    cancelled_at: list[float] = []

    async def cancel_once_running() -> None:
        task = asyncio.ensure_future(openssh.HostResolver(str(config)).resolve("slow"))
        for _ in range(400):  # (until the exec command runs: at most 20 s on a busy machine)
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.05)
        cancelled_at.append(time.monotonic())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_once_running())
    assert time.monotonic() - cancelled_at[0] < 10  # (29 s when the waiting thread is left to time out)
    assert wait_gone(int(pid_file.read_text()))
