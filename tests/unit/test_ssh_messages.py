"""The words of connection failures, as ssh words them: pure parts, in this process."""

from __future__ import annotations

import asyncio
import base64
import errno
import socket
from pathlib import Path

import pytest

from envdoctor.engine.executor import problem_from_error
from envdoctor.errors import ConfigError, ConnectError, HostKeyChangedError, HostKeyError
from envdoctor.transport import dial, host_key_refusal, known_hosts
from envdoctor.transport.openssh import parse_ssh_g
from envdoctor.transport.ssh_config_resolve import resolve_builtin


def _key(key_type: str, body: bytes) -> str:
    """A known_hosts key field: the type, then base64 of the SSH wire blob (string type, data)."""
    name = key_type.encode()
    blob = len(name).to_bytes(4, "big") + name + len(body).to_bytes(4, "big") + body
    return f"{key_type} {base64.b64encode(blob).decode()}"


ED25519_A = _key("ssh-ed25519", bytes(range(32)))
ED25519_B = _key("ssh-ed25519", bytes(range(1, 33)))
RSA = _key("ssh-rsa", bytes(range(64)))


@pytest.mark.parametrize(("error", "words"), [
    (OSError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)"), "Connection refused"),
    (OSError(errno.EHOSTUNREACH, "whatever asyncio says"), "No route to host"),
    (OSError(errno.ENETUNREACH, "whatever asyncio says"), "Network is unreachable"),
    (TimeoutError(errno.ETIMEDOUT, "timed out"), "Connection timed out"),
    (OSError("Multiple exceptions: a, b"), "Multiple exceptions: a, b"),
])
def test_an_error_is_worded_as_strerror_words_its_errno(error: OSError, words: str) -> None:
    """ssh prints strerror(errno): asyncio's 'Connect call failed (...)' never reaches the user."""
    assert dial.connect_failure("gpu1", 2222, error) == f"connect to host gpu1 port 2222: {words}"


def test_a_name_that_does_not_resolve_is_worded_as_ssh_words_it() -> None:
    """The resolver's own error (here a real one, asked for a numeric address only) in ssh's line."""
    with pytest.raises(socket.gaierror) as caught:
        socket.getaddrinfo("nosuch.invalid", 22, flags=socket.AI_NUMERICHOST)
    assert dial.resolve_failure("nosuch.invalid", caught.value) == (
        f"Could not resolve hostname nosuch.invalid: {caught.value.strerror}")
    assert dial.system_words(caught.value) == caught.value.strerror


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_refused_port_is_tried_as_often_as_connection_attempts_says(monkeypatch, attempts: int) -> None:
    """One connect per attempt (127.0.0.1 has one address); the last error is ssh's 'Connection refused'."""
    monkeypatch.setattr(dial, "RETRY_PAUSE", 0.0)
    tried = []
    connect_one = dial._connect_one

    async def counted(*args: object) -> socket.socket:
        tried.append(args[3])
        return await connect_one(*args)  # type: ignore[arg-type]  # the real one, counted

    monkeypatch.setattr(dial, "_connect_one", counted)
    port = _closed_port()
    with pytest.raises(ConnectError) as caught:
        asyncio.run(dial.dial("127.0.0.1", port, attempts=attempts, timeout=5, label="box"))
    assert str(caught.value).startswith(f"cannot reach box: connect to host 127.0.0.1 port {port}: Connection refused")
    assert tried == [("127.0.0.1", port)] * attempts


def test_a_listening_port_gives_a_connected_socket() -> None:
    """dial returns the connected socket (asyncssh then speaks SSH over it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sock = asyncio.run(dial.dial("127.0.0.1", server.getsockname()[1], attempts=1, timeout=5, label="box"))
        try:
            assert sock.getpeername() == server.getsockname()
        finally:
            sock.close()


@pytest.mark.parametrize(("key_type", "name"), [
    ("ssh-ed25519", "ED25519"), ("ssh-rsa", "RSA"), ("ecdsa-sha2-nistp256", "ECDSA"),
    ("sk-ssh-ed25519@openssh.com", "ED25519-SK"), ("ssh-ed25519-cert-v01@openssh.com", "ED25519-CERT"),
])
def test_key_types_are_named_as_ssh_names_them(key_type: str, name: str) -> None:
    """sshkey_type()'s names, as in 'Offending ED25519 key in FILE:LINE'."""
    assert host_key_refusal.type_name(key_type) == name


def _keys(tmp_path: Path, files: dict[str, str], name: str) -> known_hosts.HostKeys:
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    return known_hosts.host_keys([str(tmp_path / f) for f in files], name)


def test_a_changed_key_names_the_offending_line_and_the_removal_command(tmp_path: Path) -> None:
    """ssh's heading, the first key of the type the host sent (its file:line), and `ssh-keygen
    -R NAME -f FILE` quoted for a shell; --accept-new is never the advice."""
    keys = _keys(tmp_path, {"known_hosts": f"other {ED25519_B}\n[10.0.0.5]:2222 {RSA}\n[10.0.0.5]:2222 {ED25519_A}\n"},
                 "[10.0.0.5]:2222")
    error = host_key_refusal.changed_key("gpu1 (10.0.0.5:2222)", "[10.0.0.5]:2222", "ssh-ed25519", "SHA256:abc", keys)
    assert isinstance(error, HostKeyChangedError)
    assert str(error).startswith("REMOTE HOST IDENTIFICATION HAS CHANGED for gpu1 (10.0.0.5:2222): "
                                 "it sent the ED25519 key SHA256:abc")
    assert str(error).endswith(f"(Offending ED25519 key in {tmp_path}/known_hosts:3)")  # not the RSA line
    assert f"`ssh-keygen -R '[10.0.0.5]:2222' -f {tmp_path}/known_hosts`" in error.hint
    assert "accept-new" not in str(error) + error.hint
    assert problem_from_error(error).kind == "host-key-changed"


def test_a_changed_key_listed_in_two_files_gives_a_command_for_each(tmp_path: Path) -> None:
    """Every file that holds an old key gets its own `ssh-keygen -R` (ssh-keygen edits one file)."""
    keys = _keys(tmp_path, {"mine": f"gpu1 {ED25519_A}\n", "global": f"gpu1,10.0.0.5 {ED25519_A}\n"}, "gpu1")
    error = host_key_refusal.changed_key("gpu1", "gpu1", "ssh-ed25519", "SHA256:abc", keys)
    assert error.hint.count("ssh-keygen -R gpu1 -f ") == 2 and f"{tmp_path}/global" in error.hint


def test_an_unknown_key_is_another_problem_whose_advice_is_accept_new(tmp_path: Path) -> None:
    """No entry at all: ssh's 'No ED25519 host key is known for NAME', kind host-key, --accept-new advised."""
    error = host_key_refusal.unknown_key("gpu1", "gpu1", "ssh-ed25519", "SHA256:abc", str(tmp_path / "kh"),
                                         "StrictHostKeyChecking yes")
    assert type(error) is HostKeyError and problem_from_error(error).kind == "host-key"
    assert "No ED25519 host key is known for gpu1" in str(error)
    assert "--accept-new" in error.hint


@pytest.mark.parametrize(("line", "attempts"), [("", 1), ("connectionattempts 1\n", 1), ("connectionattempts 4\n", 4)])
def test_connection_attempts_is_read_from_ssh_g(line: str, attempts: int) -> None:
    """`ssh -G`'s connectionattempts decides how often the TCP connection is tried (1 when absent)."""
    host = parse_ssh_g(f"hostname 10.0.0.5\nport 22\nuser me\n{line}", "gpu1")
    assert host.connection_attempts == attempts


def test_the_built_in_parser_reads_connection_attempts_and_refuses_zero(tmp_path: Path) -> None:
    """Without ssh: ConnectionAttempts 3 is 3, the default 1, and 0 is refused in ssh's words."""
    config = tmp_path / "config"
    config.write_text("Host three\n  ConnectionAttempts 3\nHost zero\n  ConnectionAttempts 0\n")
    assert resolve_builtin("three", config_file=str(config)).connection_attempts == 3
    assert resolve_builtin("other", config_file=str(config)).connection_attempts == 1
    with pytest.raises(ConfigError, match="Invalid number of ConnectionAttempts"):
        resolve_builtin("zero", config_file=str(config))
