"""A host over SSH, with asyncssh: one connection per host, reused for every step.

SSH settings come from the user's OpenSSH config as ``ssh`` reads them (HostName, Port,
User, IdentityFile, UserKnownHostsFile, ProxyJump, ConnectTimeout). Host keys are checked
against known_hosts as OpenSSH does; an unknown key is refused unless the caller passed
``accept_new`` (OpenSSH's ``StrictHostKeyChecking=accept-new``), and a changed key is
always refused.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import structlog
from asyncssh.config import SSHClientConfig

from envdoctor.errors import (
    AuthError,
    CommandTimeout,
    ConfigError,
    ConnectError,
    HostKeyError,
    TransportError,
)
from envdoctor.transport.interface import CommandResult, Transport, shell_join
from envdoctor.transport.local import read_bounded

log = structlog.get_logger(__name__)

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
# OpenSSH's defaults when the config names no UserKnownHostsFile / GlobalKnownHostsFile.
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


@dataclass(frozen=True)
class SSHTarget:
    """Where to connect: an alias or hostname, with the user and port given on the command line."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        text = f"{self.user}@{self.host}" if self.user else self.host
        return f"{text}:{self.port}" if self.port else text


@dataclass(frozen=True)
class SSHOptions:
    """How to connect; the same for every host of a run."""

    config_files: tuple[str, ...] = field(default_factory=tuple)
    connect_timeout: float = 15.0
    accept_new: bool = False
    keepalive_interval: float = 15.0

    def resolved_config_files(self) -> list[str]:
        if self.config_files:
            return list(self.config_files)
        default = DEFAULT_SSH_CONFIG.expanduser()
        return [str(default)] if default.is_file() else []


class SSHTransport(Transport):
    """Commands run through the remote user's shell on one reused asyncssh connection."""

    def __init__(self, name: str, target: SSHTarget, options: SSHOptions) -> None:
        self.name = name
        self.target = target
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        #: Counters for benchmarks and tests: one connection, few sessions per host.
        self.sessions_opened = 0

    async def connect(self) -> None:
        config_files = self.options.resolved_config_files()
        config = _load_config(config_files, self.target)
        known_hosts, user_known_hosts = _known_hosts_files(config)
        hostname = str(config.get("Hostname", self.target.host))
        port = int(config.get("Port", 22))  # type: ignore[call-overload]  # asyncssh types options as object
        accept_unknown = self.options.accept_new and not _is_known(known_hosts, hostname, port)
        kwargs: dict[str, object] = {
            "config": config_files,
            "known_hosts": None if accept_unknown else known_hosts,
            "connect_timeout": self.options.connect_timeout,
            "keepalive_interval": self.options.keepalive_interval,
        }
        if self.target.user:
            kwargs["username"] = self.target.user
        if self.target.port:
            kwargs["port"] = self.target.port
        try:
            self._conn = await asyncssh.connect(self.target.host, **kwargs)  # type: ignore[arg-type]  # kwargs built above
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyError(
                f"host key of {self.name} ({hostname}:{port}) is not trusted: {exc.reason}"
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise AuthError(f"{self.name} refused authentication: {exc.reason}") from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise AuthError(f"cannot use the private key for {self.name}: {exc}") from exc
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise ConnectError(
                f"{self.name} ({hostname}:{port}) did not answer within "
                f"{self.options.connect_timeout:g}s"
            ) from exc
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH to {self.name} failed: {exc.reason}") from exc
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConnectError(f"cannot reach {self.name} ({hostname}:{port}): {reason}") from exc
        except ValueError as exc:
            raise ConfigError(f"bad SSH settings for {self.name}: {exc}") from exc
        if accept_unknown:
            _record_new_host_key(self._conn, user_known_hosts, hostname, port)
            log.warning("host_key_accepted", host=self.name, hostname=hostname, port=port)

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 5)
            except (TimeoutError, asyncio.TimeoutError):
                pass
            self._conn = None

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        if self._conn is None:
            raise TransportError(f"not connected to {self.name}")
        # sshd accepts only AcceptEnv variables, so the environment travels as `env K=V`.
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
        command = shell_join(words)
        self.sessions_opened += 1
        try:
            proc = await self._conn.create_process(command, encoding=None)
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH session to {self.name} failed: {exc.reason}") from exc

        async def communicate() -> CommandResult:
            async def feed() -> None:
                if stdin:
                    proc.stdin.write(stdin)
                proc.stdin.write_eof()

            _, (out, out_cut), (err, err_cut) = await asyncio.gather(
                feed(), read_bounded(proc.stdout), read_bounded(proc.stderr)  # type: ignore[arg-type]  # SSHReader reads like a StreamReader
            )
            completed = await proc.wait()
            status = completed.exit_status
            if status is None:  # killed by a signal on the host
                status = 128 + _signal_number(completed.exit_signal)
            return CommandResult(tuple(argv), status, out, err, out_cut or err_cut)

        try:
            return await asyncio.wait_for(communicate(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            proc.close()
            raise CommandTimeout(
                f"{argv[0]} did not finish within {timeout:g}s on {self.name}"
            ) from None
        except (asyncssh.Error, ConnectionError) as exc:
            raise ConnectError(f"connection to {self.name} dropped: {exc}") from exc


def _signal_number(exit_signal: tuple[str, bool, str, str] | None) -> int:
    if not exit_signal:
        return 127
    try:
        return int(signal.Signals["SIG" + exit_signal[0]])
    except KeyError:
        return 127


def _load_config(paths: list[str], target: SSHTarget) -> SSHClientConfig:
    try:
        return SSHClientConfig.load(
            None,
            paths,
            False,
            False,
            False,
            getpass.getuser(),
            target.user if target.user else (),
            target.host,
            target.port if target.port else (),
        )
    except (OSError, asyncssh.ConfigParseError) as exc:
        raise ConfigError(f"cannot read SSH config {', '.join(paths)}: {exc}") from exc


def _known_hosts_files(config: SSHClientConfig) -> tuple[list[str], str]:
    """The known_hosts files OpenSSH would consult for this host (those that exist), and the
    user file a newly accepted key is written to."""
    user_files = [os.path.expanduser(str(p)) for p in config.get("UserKnownHostsFile") or DEFAULT_USER_KNOWN_HOSTS]  # type: ignore[attr-defined]  # asyncssh types options as object
    global_files = [os.path.expanduser(str(p)) for p in config.get("GlobalKnownHostsFile") or DEFAULT_GLOBAL_KNOWN_HOSTS]  # type: ignore[attr-defined]  # as above
    existing = [f for f in [*user_files, *global_files] if os.path.isfile(f)]
    return existing, user_files[0]


def _is_known(files: list[str], hostname: str, port: int) -> bool:
    if not files:
        return False
    try:
        trusted = asyncssh.match_known_hosts(files, hostname, "", port if port != 22 else None)
    except (OSError, ValueError, asyncssh.Error):
        return True  # unreadable known_hosts: never accept a key on its account
    host_keys, ca_keys = trusted[0], trusted[1]
    revoked = trusted[2]
    return bool(host_keys or ca_keys or revoked)


def _record_new_host_key(
    conn: asyncssh.SSHClientConnection, known_hosts_file: str, hostname: str, port: int
) -> None:
    """Append the key we were shown to the user's known_hosts, as accept-new does."""
    key = conn.get_server_host_key()
    if key is None:
        return
    pattern = hostname if port == 22 else f"[{hostname}]:{port}"
    target = Path(known_hosts_file)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{pattern} {key.export_public_key('openssh').decode().strip()}\n"
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(line)
