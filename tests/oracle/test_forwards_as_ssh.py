"""The built-in parser refuses the forwarding lines `ssh -G` refuses, in blocks that apply and
in blocks that do not (ssh parses every line of every file), and accepts the others: an unset
`${VAR}` in a socket path, ports out of range, paths too long for a socket, missing targets,
extra words; for the lines that apply, an unknown `%` token in a socket path. Real `ssh -G`
is the oracle for every line, in both places."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_config_resolve import resolve_builtin

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (the oracle)")

LONG = "/tmp/" + "s" * 110
LINES = [
    "RemoteForward ${FWD_UNSET}/gnupg/S.gpg-agent /run/gpg/S.gpg-agent.extra",
    "RemoteForward ${FWD_SET}/gnupg/S.gpg-agent /run/gpg/S.gpg-agent.extra",
    "LocalForward ${FWD_UNSET}/a.sock localhost:22",
    "LocalForward 8080 ${FWD_UNSET}:80",
    "LocalForward 8080 localhost:80",
    "LocalForward 127.0.0.1:8080 localhost:80",
    "LocalForward [::1]:8080 [::1]:80",
    "LocalForward [::1]:8080 [::1]80",
    "LocalForward 8080",
    "LocalForward 0 localhost:80",
    "LocalForward 70000 localhost:80",
    "LocalForward 8080 localhost:0",
    "LocalForward 8080 localhost:http",
    "LocalForward 8080 localhost:nosuchservice",
    "LocalForward http localhost:80",
    "LocalForward 8080 localhost:80 extra",
    'LocalForward "8080 localhost:80"',
    'LocalForward 8080 ""',
    "LocalForward /tmp/a.sock /tmp/b.sock",
    "LocalForward /tmp/a.sock localhost:80",
    "LocalForward 8080 /tmp/b.sock",
    f"LocalForward {LONG} localhost:80",
    f"RemoteForward 8080 {LONG}",
    "LocalForward /tmp/%h-%p-%r.sock /tmp/b.sock",
    "LocalForward /tmp/%Q.sock /tmp/b.sock",
    "RemoteForward /tmp/r.sock /tmp/%Z.sock",
    "LocalForward 8080 localhost:%Z",
    "LocalForward /tmp/a%.sock /tmp/b",
    "LocalForward 8080 ${}:80",
    "LocalForward 8080 ${FWD_SET:80",
    r"LocalForward /tmp/x\:y.sock localhost:80",
    "LocalForward a:b:c:d:e",
    "LocalForward 1:2 3:4:5",
    "LocalForward 1.2.3.4:80:5.6.7.8:90 extra",
    "LocalForward [a:80 b:90",
    "RemoteForward 8080",
    "RemoteForward 0 localhost:80",
    'RemoteForward 8080 ""',
    "RemoteForward 127.0.0.1:8080",
    "RemoteForward 1:2:3",
    "RemoteForward /tmp/r.sock",
    "DynamicForward 1080",
    "DynamicForward 127.0.0.1:1080",
    "DynamicForward 0",
    "DynamicForward 1080 extra",
    "DynamicForward /tmp/socks.sock",
    "DynamicForward /tmp/%Q.sock",
    "DynamicForward a:b:c",
    "DynamicForward",
]
PLACES = {"applies": "Host h\n  {line}\n", "elsewhere": "Host other\n  {line}\nHost h\n  Port 2222\n",
          "cleared": "Host h\n  ClearAllForwardings yes\n  {line}\n"}


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FWD_SET", "/tmp/fwd-set")
    monkeypatch.delenv("FWD_UNSET", raising=False)


def compare(tmp_path: Path, lines: list[str], place: str) -> tuple[list[tuple[str, str]], int]:
    """The lines where the built-in parser and ssh -G disagree (put in ``place``), and how
    many lines ssh -G refused."""
    disagreements = []
    refused_by_ssh = 0
    for number, line in enumerate(lines):
        config = tmp_path / f"config{number}"
        config.write_text(PLACES[place].format(line=line))
        ssh_ok = subprocess.run(["ssh", "-G", "-F", str(config), "h"], capture_output=True, stdin=subprocess.DEVNULL,
                                timeout=60).returncode == 0
        refused_by_ssh += not ssh_ok
        try:
            resolve_builtin("h", config_file=str(config))
            ours = True
        except ConfigError as exc:
            assert "\n" not in str(exc)
            ours = False
        if ours != ssh_ok:
            disagreements.append((line, "ssh accepts" if ssh_ok else "ssh refuses"))
    return disagreements, refused_by_ssh


@pytest.mark.parametrize("place", PLACES)
def test_forwarding_lines_are_refused_where_ssh_refuses_them(tmp_path: Path, place: str) -> None:
    """For every line, in this place: the built-in parser resolves `h` exactly when ssh -G does."""
    disagreements, refused_by_ssh = compare(tmp_path, LINES, place)
    assert not disagreements
    assert refused_by_ssh >= 20  # (the corpus really holds lines ssh refuses)


VALUES = [f"RekeyLimit {v}" for v in (
    "default", "1G", "1G 1h", "1G none", "1G none extra", "1G 1h extra", "1G 1x", "0", "15", "16", "-1", "1.5K",
    "0.01K", "0.02K", "15.9", "1KB", "1K-", "K", ".", "1..2", "+-1", "--1", "1Z", "123456789012345678901",
    "12345678901234567890", "9E", "8E", "7E", "1." + "9" * 25 + "K", "0x10", "1e3", "2b", "16 ''",
)] + [f"TunnelDevice {v}" for v in (
    "any", "ANY:any", "0", "1:2", "1:", ":1", "-1", "+5", "2147483645", "2147483646", "x", "1:x", "any:2 extra",
    "1:2:3",
)]


@pytest.mark.parametrize("place", ["applies", "elsewhere"])
def test_rekey_limit_and_tunnel_device_are_refused_where_ssh_refuses_them(tmp_path: Path, place: str) -> None:
    """RekeyLimit sizes (units, fractions, overflow, the 16-byte floor, the time after it) and
    TunnelDevice values: the built-in parser resolves `h` exactly when ssh -G does."""
    disagreements, refused_by_ssh = compare(tmp_path, VALUES, place)
    assert not disagreements
    assert refused_by_ssh >= 15
