"""The words of connection failures, as ssh words them: pure parts, in this process."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from envdoctor.engine.executor import problem_from_error
from envdoctor.errors import HostKeyChangedError, HostKeyError
from envdoctor.transport import host_key_refusal, known_hosts


def _key(key_type: str, body: bytes) -> str:
    """A known_hosts key field: the type, then base64 of the SSH wire blob (string type, data)."""
    name = key_type.encode()
    blob = len(name).to_bytes(4, "big") + name + len(body).to_bytes(4, "big") + body
    return f"{key_type} {base64.b64encode(blob).decode()}"


ED25519_A = _key("ssh-ed25519", bytes(range(32)))
ED25519_B = _key("ssh-ed25519", bytes(range(1, 33)))
RSA = _key("ssh-rsa", bytes(range(64)))


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