"""A real OpenSSH server on 127.0.0.1 for the end-to-end tests (and the benchmarks).

Generates a host key, a client key, an ``ssh_config`` with several aliases pointing at the
server and a ``known_hosts`` that trusts exactly that host key. Readiness is polled (the
server's banner), never slept for.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str | None:
    found = shutil.which("sshd")
    return found or next((c for c in SSHD_CANDIDATES if os.path.exists(c)), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path, kind: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


def wait_for_banner(port: int, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)  # a poll interval, not a wait for readiness
    raise RuntimeError(f"sshd on port {port} did not answer in time")


@dataclass
class SSHServer:
    """A running sshd and the client-side files that reach it."""

    root: Path
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    log: Path
    aliases: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def write_alias_config(self, aliases: list[str], *, known_hosts: Path | None = None, path: Path | None = None) -> Path:
        """An ssh_config where each alias is this server; returns its path."""
        path = path or self.ssh_config
        lines = []
        for alias in aliases:
            lines += [
                f"Host {alias}",
                "    HostName 127.0.0.1",
                f"    Port {self.port}",
                f"    User {self.user}",
                f"    IdentityFile {self.client_key}",
                "    IdentitiesOnly yes",
                f"    UserKnownHostsFile {known_hosts or self.known_hosts}",
                "    StrictHostKeyChecking yes",
                "",
            ]
        path.write_text("\n".join(lines))
        return path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_sshd(root: Path, aliases: list[str], *, max_startups: str = "300:30:600",
               client_key: Path | None = None, host_certificate_ca: Path | None = None,
               host_key_type: str = "ed25519", extra_config: Sequence[str] = ()) -> SSHServer:
    """A new sshd with its own host key. ``client_key``: accept that existing key (e.g. another
    server's) instead of generating one, so one identity reaches two servers with different host
    keys. ``host_certificate_ca``: a CA private key that signs the host key (principal 127.0.0.1),
    served as the sshd's HostCertificate. ``host_key_type``: ssh-keygen's -t for the host key
    (``host_<type>`` in ``root``). ``extra_config``: more sshd_config lines (an old server's
    algorithms)."""
    sshd = find_sshd()
    if sshd is None:
        raise RuntimeError("sshd is not installed (apt-get install openssh-server)")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    host_key = root / f"host_{host_key_type}"
    host_pub = keygen(host_key, host_key_type)
    if client_key is None:
        client_key = root / "client_ed25519"
        client_pub = keygen(client_key)
    else:
        client_pub = Path(f"{client_key}.pub").read_text().strip()
    (root / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    certificate = []
    if host_certificate_ca is not None:
        subprocess.run(["ssh-keygen", "-q", "-s", str(host_certificate_ca), "-h", "-I", "envdoctor-test",
                        "-n", "127.0.0.1", f"{host_key}.pub"], check=True)
        certificate = [f"HostCertificate {host_key}-cert.pub"]
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    log = root / "sshd.log"
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                *certificate,
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                "StrictModes no",
                "UsePAM no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "LogLevel VERBOSE",
                f"MaxStartups {max_startups}",
                "MaxSessions 200",
                "Subsystem sftp internal-sftp",
                *extra_config,
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(config), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = SSHServer(root, port, getpass.getuser(), client_key, known_hosts, root / "ssh_config", log, aliases, proc)
    try:
        wait_for_banner(port, time.monotonic() + 20, proc)
    except RuntimeError:
        server.stop()
        raise RuntimeError(f"sshd did not start; its log says:\n{server.log_text()}") from None
    server.write_alias_config(aliases)
    return server
