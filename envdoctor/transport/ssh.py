"""A host over SSH, with asyncssh: one connection per host, reused for every step.

SSH settings come from the user's OpenSSH config as ``ssh`` reads them (HostName, Port,
User, IdentityFile, UserKnownHostsFile, ProxyJump, ConnectTimeout). Host keys are checked
against known_hosts as OpenSSH does; an unknown key is refused unless the caller passed
``accept_new`` (OpenSSH's ``StrictHostKeyChecking=accept-new``), and a changed key is
always refused.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import getpass
import os
import random
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import asyncssh
from asyncssh.config import SSHClientConfig

from envdoctor.errors import (
    AuthError,
    CommandTimeout,
    ConfigError,
    ConnectError,
    HostKeyError,
    TransportError,
)
from envdoctor.logsafe import get_logger
from envdoctor.transport.interface import CommandResult, OutputSink, Transport, shell_join
from envdoctor.transport.local import pump, read_bounded
from envdoctor.transport.ssh_config import reduced_config_files
from envdoctor.transport.target import SSHOptions, SSHTarget

log = get_logger(__name__)

# OpenSSH's defaults when the config names no UserKnownHostsFile / GlobalKnownHostsFile.
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


class SSHTransport(Transport):
    """Commands run through the remote user's shell on one reused asyncssh connection."""

    def __init__(self, name: str, target: SSHTarget, options: SSHOptions) -> None:
        self.name = name
        self.target = target
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        #: Counters for benchmarks and tests: one connection, few sessions per host.
        self.sessions_opened = 0
        self.connect_attempts = 0

    async def connect(self) -> None:
        """Open the connection, retrying with backoff when the host refused or dropped it
        before the SSH handshake finished (sshd's MaxStartups, a restarting daemon, a reset).

        Only connecting is retried: nothing has run on the host yet, so trying again is
        safe. A timeout, a refused key or a refused login is never retried: a blackholed
        host must end after its timeout, and repeating a wrong credential helps no one.
        """
        config_files = self.options.resolved_config_files()
        host_files = reduced_config_files(config_files, self.target.host)
        config = _load_config(host_files, self.target)
        known_hosts, user_known_hosts = _known_hosts_files(config)
        hostname = str(config.get("Hostname", self.target.host))
        port = int(config.get("Port", 22))  # type: ignore[call-overload]  # asyncssh types options as object
        accept_unknown = self.options.accept_new and not _is_known(known_hosts, hostname, port)
        kwargs: dict[str, object] = {
            # asyncssh reads the files itself: give it the cut-down ones (see ssh_config.py),
            # except with ProxyJump, whose jump host needs its own blocks of the whole files.
            "config": config_files if config.get("ProxyJump") else host_files,
            "known_hosts": None if accept_unknown else known_hosts,
            "connect_timeout": self.options.connect_timeout,
            "keepalive_interval": self.options.keepalive_interval,
        }
        if self.target.user:
            kwargs["username"] = self.target.user
        if self.target.port:
            kwargs["port"] = self.target.port
        delays = retry_delays(self.options.connect_retries, self.options.retry_backoff)
        for attempt in range(len(delays) + 1):
            try:
                self._conn = await self._open(kwargs, hostname, port)
                break
            except _Retryable as exc:
                if attempt == len(delays):
                    raise exc.error from exc.__cause__
                log.info("connect_retry", host=self.name, attempt=attempt + 1,
                         delay=round(delays[attempt], 2), error=str(exc.error))
                await asyncio.sleep(delays[attempt])
        self.connect_attempts = attempt + 1
        if accept_unknown:
            assert self._conn is not None
            fingerprint = _record_new_host_key(self._conn, user_known_hosts, hostname, port)
            # Never a silent accept: say which key was trusted, as ssh's "Permanently added".
            log.warning("host_key_accepted", host=self.name, hostname=hostname, port=port,
                        fingerprint=fingerprint, known_hosts=user_known_hosts)

    async def _open(self, kwargs: dict[str, object], hostname: str, port: int) -> asyncssh.SSHClientConnection:
        """One connection attempt; errors worth another attempt come out as :class:`_Retryable`."""
        try:
            return await asyncssh.connect(self.target.host, **kwargs)  # type: ignore[arg-type]  # kwargs built above
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
        except asyncssh.ConnectionLost as exc:
            # sshd closes a connection past MaxStartups before its banner: worth a retry.
            error = ConnectError(f"{self.name} ({hostname}:{port}) closed the connection during the handshake")
            raise _Retryable(error) from exc
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH to {self.name} failed: {exc.reason}") from exc
        except socket.gaierror as exc:
            raise ConnectError(f"cannot resolve {hostname} for {self.name}: {exc.strerror}") from exc
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            error = ConnectError(f"cannot reach {self.name} ({hostname}:{port}): {reason}")
            if isinstance(exc, ConnectionError) or exc.errno in _RETRYABLE_ERRNOS:
                raise _Retryable(error) from exc
            raise error from exc
        except ValueError as exc:
            raise ConfigError(f"bad SSH settings for {self.name}: {exc}") from exc

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

    async def stream(
        self,
        argv: Sequence[str],
        *,
        on_stdout: OutputSink,
        on_stderr: OutputSink,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        if self._conn is None:
            raise TransportError(f"not connected to {self.name}")
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
        self.sessions_opened += 1
        try:
            proc = await self._conn.create_process(shell_join(words), encoding=None)
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH session to {self.name} failed: {exc.reason}") from exc
        # stdin stays open (and empty) until the command ends: its EOF tells the host that we left.
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(pump(proc.stdout, on_stdout), pump(proc.stderr, on_stderr))  # type: ignore[arg-type]  # SSHReader reads like a StreamReader
                completed = await proc.wait()
        except TimeoutError:
            proc.close()
            raise CommandTimeout(f"{argv[0]} did not finish within {timeout:g}s on {self.name}") from None
        except (asyncssh.Error, ConnectionError) as exc:
            raise ConnectError(f"connection to {self.name} dropped: {exc}") from exc
        except BaseException:
            proc.close()  # Ctrl-C: closing the channel closes the command's stdin on the host
            raise
        if completed.exit_status is None:
            return 128 + _signal_number(completed.exit_signal)
        return completed.exit_status


_RETRYABLE_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE})


class _Retryable(Exception):
    """Carries the error to raise if no attempt is left."""

    def __init__(self, error: TransportError) -> None:
        super().__init__(str(error))
        self.error = error


def retry_delays(retries: int, backoff: float) -> list[float]:
    """Pauses before each further attempt: exponential, each with up to 50% random jitter so
    that a fleet refused at once does not come back at once."""
    return [backoff * (2**i) * (1 + random.random() / 2) for i in range(max(0, retries))]


def _signal_number(exit_signal: tuple[str, bool, str, str] | None) -> int:
    if not exit_signal:
        return 127
    try:
        return int(signal.Signals["SIG" + exit_signal[0]])
    except KeyError:
        return 127


@functools.cache
def _local_user() -> str:
    """The local user name, looked up once: without USER/LOGNAME set, getpass asks NSS, which
    can take milliseconds, and asyncssh asks again for every connection unless LOGNAME is set."""
    name = getpass.getuser()
    os.environ.setdefault("LOGNAME", name)
    return name


def _load_config(paths: list[str], target: SSHTarget) -> SSHClientConfig:
    try:
        return SSHClientConfig.load(
            None,
            paths,
            False,
            False,
            False,
            _local_user(),
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
) -> str:
    """Append the key we were shown to the user's known_hosts, as accept-new does; returns
    its SHA256 fingerprint."""
    key = conn.get_server_host_key()
    if key is None:
        return ""
    pattern = hostname if port == 22 else f"[{hostname}]:{port}"
    target = Path(known_hosts_file)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{pattern} {key.export_public_key('openssh').decode().strip()}\n"
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(line)
    return str(key.get_fingerprint("sha256"))
