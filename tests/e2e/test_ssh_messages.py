"""Connection failures told as ssh tells them, with real `ssh` on the same files as the oracle:
a changed host key (the offending known_hosts line, the `ssh-keygen -R` that removes it, never
--accept-new), an unknown one, a refused port (at once, as often as ConnectionAttempts says),
a connect timeout, and a server that accepts and never sends its SSH banner."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.faults_support import results_by_id
from tests.sshd import SSHServer, free_port, keygen

pytestmark = pytest.mark.e2e


def write_config(sshd: SSHServer, folder: Path, *, port: int | None = None, extra: str = "") -> Path:
    """One alias `box` for 127.0.0.1 (the test sshd's port unless another is given), strict host keys."""
    config = folder / "ssh_config"
    config.write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {port or sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {folder / 'known_hosts'}\n"
        f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n{extra}")
    return config


def ssh_stderr(config: Path, *options: str) -> str:
    """The oracle: what `ssh -F config box true` says on stderr (it must fail)."""
    proc = subprocess.run(["ssh", "-F", str(config), *options, "box", "true"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert proc.returncode == 255, proc.stderr
    return proc.stderr


def reachable(run_cli, config: Path, *args: str) -> tuple[dict, str]:
    """host.reachable of `envdoctor check box` in JSON, and the run's stderr."""
    res = run_cli("check", "box", "--ssh-config", str(config), "--format", "json", "--only", "host.reachable", *args)
    assert res.exit_status == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    return results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"], res.stderr


def test_a_changed_host_key_says_so_with_the_line_and_the_command_that_removes_it(run_cli, sshd, tmp_path):
    """A key other than the one known_hosts holds is 'REMOTE HOST IDENTIFICATION HAS CHANGED',
    naming the offending line as ssh names it and `ssh-keygen -R '[127.0.0.1]:PORT' -f FILE`,
    with and without --accept-new, and never advising --accept-new. Running that command is
    the whole remedy: then --accept-new records the real key and the other line stays."""
    known = tmp_path / "known_hosts"
    other = f"[127.0.0.2]:{sshd.port} {keygen(tmp_path / 'unrelated')}\n"
    known.write_text(other + f"[127.0.0.1]:{sshd.port} {keygen(tmp_path / 'old_host_key')}\n")
    config = write_config(sshd, tmp_path)
    oracle = ssh_stderr(config)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in oracle
    offending = re.search(r"Offending \S+ key in \S+", oracle)
    assert offending and offending.group() == f"Offending ED25519 key in {known}:2", oracle
    assert f'ssh-keygen -f "{known}" -R "[127.0.0.1]:{sshd.port}"' in oracle
    for args in ([], ["--accept-new"]):
        result, _ = reachable(run_cli, config, *args)
        assert result["details"]["kind"] == "host-key-changed", result
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result["message"]
        assert offending.group() in result["message"]
        command = f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {known}"
        assert f"`{command}`" in result["fix"]
        assert "accept-new" not in result["message"] + result["fix"]
    text = run_cli("check", "box", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert "host key changed" in text.stdout and "accept-new" not in text.stdout, text.stdout

    subprocess.run(shlex.split(command), check=True, capture_output=True)
    assert known.read_text().startswith(other) and str(sshd.port) not in known.read_text().replace(other, "")
    res = run_cli("check", "box", "--ssh-config", str(config), "--accept-new", "--only", "host.reachable")
    assert res.exit_status == 0, res.stdout + res.stderr


def test_an_unknown_host_key_is_a_different_problem_from_a_changed_one(run_cli, sshd, tmp_path):
    """No entry for the host: kind host-key (not host-key-changed), ssh's 'No ED25519 host key
    is known for [127.0.0.1]:PORT', and here --accept-new is the advice."""
    config = write_config(sshd, tmp_path)
    oracle = ssh_stderr(config)
    words = f"No ED25519 host key is known for [127.0.0.1]:{sshd.port}"
    assert words in oracle
    result, _ = reachable(run_cli, config)
    assert result["details"]["kind"] == "host-key", result
    assert "host key of box" in result["message"] and "is unknown" in result["message"]
    assert words in result["message"]
    assert "--accept-new" in result["fix"]


@pytest.mark.parametrize("attempts", [None, 2])
def test_a_refused_port_is_named_as_ssh_names_it_and_tried_as_connection_attempts_says(run_cli, sshd, tmp_path,
                                                                                       attempts):
    """A closed port: ssh's own line ('connect to host 127.0.0.1 port P: Connection refused'),
    one attempt by default (no retry logged), two with ConnectionAttempts 2, as ssh tries."""
    port = free_port()
    config = write_config(sshd, tmp_path, port=port,
                          extra=f"  ConnectionAttempts {attempts}\n" if attempts else "")
    oracle = ssh_stderr(config, "-v")
    line = f"connect to host 127.0.0.1 port {port}: Connection refused"
    assert f"ssh: {line}" in oracle
    assert oracle.count("Trying again") == (attempts or 1) - 1, "the oracle tries as often as ConnectionAttempts says"
    result, stderr = run_verbose(run_cli, config)
    assert result["details"]["kind"] == "unreachable"
    assert line in result["message"] and "Connect call failed" not in result["message"]
    assert stderr.count("connect_retry") == (attempts or 1) - 1, stderr
    if attempts:
        assert f"({attempts} attempts, ConnectionAttempts {attempts})" in result["message"]


def run_verbose(run_cli, config: Path, *args: str) -> tuple[dict, str]:
    res = run_cli("-v", "check", "box", "--ssh-config", str(config), "--format", "json", "--only", "host.reachable",
                  *args)
    assert res.exit_status == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    return results_by_id(json.loads(res.stdout)["hosts"][0])["host.reachable"], res.stderr


@contextmanager
def full_backlog() -> Iterator[int]:
    """A port on 127.0.0.1 whose accept queue is full: the kernel drops further SYNs, so a
    connect times out (a listener that never accepts, with its queue filled)."""
    server = socket.socket()
    fillers = []
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(filler)
        yield port
    finally:
        for sock in (*fillers, server):
            sock.close()


def test_a_connect_timeout_is_named_as_ssh_names_it(run_cli, sshd, tmp_path):
    """A port whose SYNs go unanswered: 'connect to host 127.0.0.1 port P: Connection timed out',
    as ssh says it after ConnectTimeout."""
    with full_backlog() as port:
        config = write_config(sshd, tmp_path, port=port, extra="  ConnectTimeout 2\n")
        oracle = ssh_stderr(config)
        line = f"connect to host 127.0.0.1 port {port}: Connection timed out"
        assert f"ssh: {line}" in oracle, oracle
        result, _ = reachable(run_cli, config)
    assert result["details"]["kind"] == "unreachable"
    assert line in result["message"], result


@contextmanager
def silent_server(lifetime: float = 60) -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte
    (no SSH banner); it closes everything after ``lifetime`` seconds whatever happens."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()
    deadline = time.monotonic() + lifetime

    def serve() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                accepted.append(server.accept()[0])
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for sock in (*accepted, server):
            sock.close()


def test_a_server_that_never_sends_its_banner_is_a_handshake_timeout(run_cli, sshd, tmp_path):
    """Accepted but silent: 'did not answer the SSH handshake within 2s', with ssh's 'Connection
    timed out during banner exchange' (not 'closed the connection')."""
    with silent_server() as port:
        config = write_config(sshd, tmp_path, port=port)
        oracle = ssh_stderr(config, "-o", "ConnectTimeout=2")
        assert "Connection timed out during banner exchange" in oracle
        result, _ = reachable(run_cli, config, "--connect-timeout", "2")
    assert result["details"]["kind"] == "unreachable"
    assert f"box (127.0.0.1:{port}) did not answer the SSH handshake within 2s" in result["message"], result
    assert "Connection timed out during banner exchange" in result["message"]
    assert "closed the connection" not in result["message"]


@pytest.mark.parametrize("value", [None, "1", "3", "0"])
def test_connection_attempts_is_what_ssh_g_says_for_both_resolvers(tmp_path, monkeypatch, value):
    """ConnectionAttempts as `ssh -G` resolves it (its default 1; 0 refused), from ssh -G and
    from the built-in parser alike."""
    import asyncio

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # every answer from ssh -G itself
    from envdoctor.errors import ConfigError
    from envdoctor.transport.openssh import HostResolver

    config = tmp_path / "config"
    config.write_text("Host a\n  HostName 10.0.0.5\n" + (f"  ConnectionAttempts {value}\n" if value else ""))
    proc = subprocess.run(["ssh", "-G", "-F", str(config), "a"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, check=False)
    for ssh in ("ssh", None):
        resolver = HostResolver(str(config), ssh=ssh)
        if proc.returncode != 0:
            assert "Invalid number of ConnectionAttempts" in proc.stderr
            with pytest.raises(ConfigError, match="Invalid number of ConnectionAttempts"):
                asyncio.run(resolver.resolve("a"))
            continue
        expected = int(re.search(r"^connectionattempts (\d+)$", proc.stdout, re.MULTILINE).group(1))
        assert asyncio.run(resolver.resolve("a")).connection_attempts == expected
