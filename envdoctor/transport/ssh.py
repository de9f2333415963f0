"""A host over SSH, with asyncssh: one connection per host, reused for every step.

Where to connect is OpenSSH's own answer (``ssh -G``, see :mod:`openssh`): asyncssh reads no
config file and gets the resolved HostName, Port, User, existing IdentityFiles, ProxyJump
hops (each resolved) and ConnectTimeout. Host keys are decided as OpenSSH decides them
(:mod:`known_hosts`: HostKeyAlias, ``[host]:port``, hashed names, @revoked, @cert-authority,
CheckHostIP) under StrictHostKeyChecking from the config, ``--accept-new`` lifting it to
accept-new; a changed or revoked key is refused under every setting.
"""

from __future__ import annotations

import asyncio
import copy
import errno
import functools
import getpass
import os
import random
import re
import signal
import socket
from collections.abc import Mapping, Sequence

import asyncssh

from envdoctor.errors import (
    AuthError,
    CommandTimeout,
    ConfigError,
    ConnectError,
    HostKeyError,
    TransportError,
)
from envdoctor.logsafe import get_logger
from envdoctor.transport import algorithms, ciphers, host_key_refusal, known_hosts, revoked_keys
from envdoctor.transport.dial import dial, system_words
from envdoctor.transport.first_line import FirstLine, FirstLineWatch, GuardNote, stop_guard_command
from envdoctor.transport.interface import (
    MAX_OUTPUT_BYTES,
    BoundedSink,
    CommandResult,
    OutputSink,
    Transport,
    shell_join,
)
from envdoctor.transport.local import pump
from envdoctor.transport.openssh import default_resolver
from envdoctor.transport.target import ResolvedHost, SSHOptions, SSHTarget

log = get_logger(__name__)


#: Printed by the remote shell right before each command (``echo`` works alike in sh, bash,
#: zsh, csh and fish). sshd runs a command through the user's login shell, which may read rc
#: files that print a banner or a ``module load`` message first; everything up to this line
#: is theirs, not the command's. Random per run, so that no rc file prints it by chance.
BEGIN_MARK = b"envdoctor-begin-" + os.urandom(8).hex().encode("ascii")
#: A stream holds back at most this much while it waits for the mark (then it passes all on).
_BEGIN_WAIT_BYTES = 1 << 20


def with_begin_mark(command: str) -> str:
    return f"echo {BEGIN_MARK.decode('ascii')}; {command}"


class _AfterBeginMark:
    """An OutputSink that passes on what follows the begin mark: what the login shell's rc
    files printed before it is dropped. Output without the mark (a ForceCommand ran instead
    of ours) is passed on whole."""

    def __init__(self, sink: OutputSink) -> None:
        self.sink = sink
        self.held: bytes | None = b""  # None once the mark was seen (or given up on)

    def __call__(self, chunk: bytes) -> None:
        if self.held is None:
            self.sink(chunk)
            return
        self.held += chunk
        at = self.held.find(BEGIN_MARK + b"\n")
        if at >= 0:
            rest, self.held = self.held[at + len(BEGIN_MARK) + 1:], None
        elif len(self.held) > _BEGIN_WAIT_BYTES:
            rest, self.held = self.held, None
        else:
            return
        if rest:
            self.sink(rest)

    def close(self) -> None:
        """At the end of the stream: what was held back without a mark is the command's."""
        if self.held:
            self.sink(self.held)
        self.held = None


async def read_after_begin_mark(stream: asyncio.StreamReader, limit: int = MAX_OUTPUT_BYTES) -> tuple[bytes, bool]:
    """:func:`read_bounded` of what follows the begin mark: the cap counts the command's own
    bytes, not the mark nor a banner. Returns (data, truncated)."""
    kept = BoundedSink(limit)
    sink = _AfterBeginMark(kept)
    await pump(stream, sink)
    sink.close()
    return kept.value()


#: What a login shell other than sh may change inside a single-quoted word: csh and tcsh
#: end it at a line end and expand ``!`` history; fish reads ``\\`` and ``\'`` as escapes.
_NOT_FOR_EVERY_SHELL = re.compile(r"[\n\r!\\]")
#: Runs of characters that do not pass as themselves through every layer of login_shell_line's
#: form (the login shell's single quotes, sh's double quotes, printf's format).
_NOT_PLAIN = re.compile(r"[^A-Za-z0-9 \-_./,:=+@#^~()\[\]{}<>|&;*?]+")


def _octal(match: re.Match[str]) -> str:
    return "".join("\\%03o" % byte for byte in match.group().encode("utf-8"))


@functools.lru_cache(maxsize=256)  # the same probe command goes to every host of a fleet
def login_shell_line(command: str) -> str:
    """``command`` (sh syntax) as a line that any login shell hands to sh unchanged: sshd runs
    it with the user's shell, which may be tcsh or fish. A line with nothing they read
    differently is itself; otherwise it becomes ``sh -c 'eval "$(printf "...")"'`` with every
    other byte as a printf octal escape, so that the login shell sees no line end, no ``!``
    and no backslash pair, and sh gets the exact bytes back."""
    if not _NOT_FOR_EVERY_SHELL.search(command):
        return command
    return "sh -c 'eval \"$(printf \"%s\")\"'" % _NOT_PLAIN.sub(_octal, command)


def _command_line(argv: Sequence[str], env: Mapping[str, str] | None) -> str:
    """The line the remote shell runs: the begin mark, then argv quoted (sshd accepts only
    AcceptEnv variables, so the environment travels as `env K=V`) in a form every login
    shell passes on to sh (login_shell_line)."""
    words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
    return with_begin_mark(login_shell_line(shell_join(words)))


class SSHTransport(Transport):
    """Commands run through the remote user's shell on one reused asyncssh connection."""

    def __init__(self, name: str, target: SSHTarget, options: SSHOptions) -> None:
        self.name = name
        self.target = target
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jumps: list[asyncssh.SSHClientConnection] = []
        #: Counters for benchmarks and tests: one connection, few sessions per host.
        self.sessions_opened = 0
        self.connect_attempts = 0

    @property
    def destination(self) -> str:
        return f"ssh:{self.target}"

    async def connect(self) -> None:
        """Resolve the destination as OpenSSH does (``ssh -G``), then connect to exactly that:
        through each ProxyJump hop in turn, every hop's host key checked by its own settings.

        The TCP connection is tried as ssh tries it: ``ConnectionAttempts`` times (ssh's default
        is once), so a refused port fails at once (:mod:`dial`). A host that accepted and then
        dropped the connection before the SSH handshake finished (sshd's MaxStartups, a
        restarting daemon, a reset) is connected to again, up to ``connect_retries`` times:
        nothing has run on the host yet. A timeout, a refused key or a refused login is never retried.
        """
        plan = await default_resolver(self.options).plan(self.target.host, self.target.user, self.target.port)
        tunnel: asyncssh.SSHClientConnection | None = None
        try:
            for hop in plan.jumps:
                tunnel = await self._open_checked(hop, tunnel, f"{self.name} (jump host {hop.host})")
                self._jumps.append(tunnel)
            self._conn = await self._open_checked(plan.target, tunnel, self.name)
        except BaseException:
            await self.close()  # the jump hosts already reached: nobody else closes them
            raise

    async def _open_checked(self, host: ResolvedHost, tunnel: asyncssh.SSHClientConnection | None,
                            label: str) -> asyncssh.SSHClientConnection:
        keys = known_hosts.host_keys(host.known_hosts_files, _lookup_name(host))
        policy, why = known_hosts.host_key_policy(
            host.strict_host_key_checking, accept_new=self.options.accept_new,
            allow_no_check=self.options.allow_no_host_key_check)
        if policy == known_hosts.NO_CHECK:
            log.warning("host_key_check_disabled", host=label, reason=why,
                        note="unknown host keys are accepted; changed and revoked keys are still refused")
        if keys.unreadable:
            raise HostKeyError(f"cannot read known_hosts file {keys.unreadable[0]} for {label}")
        accept_unknown = policy != known_hosts.STRICT and not keys.known
        record_to = known_hosts.record_file(host.user_known_hosts_files)
        if accept_unknown and record_to is None:
            raise HostKeyError(
                f"host key of {label} is unknown and cannot be recorded: the first UserKnownHostsFile is "
                f"{(host.user_known_hosts_files or ('none',))[0]!r}",
                hint="set UserKnownHostsFile to a file for this host, or add its key there yourself")
        timeout = self.options.effective_connect_timeout(host.connect_timeout)
        kwargs = _connect_kwargs(host, keys, tunnel, timeout, self.options.keepalive_interval, accept_unknown)
        delays = retry_delays(self.options.connect_retries, self.options.retry_backoff)
        for attempt in range(len(delays) + 1):
            try:
                conn = await self._open(kwargs, host, label, timeout, why, keys)
                break
            except _Retryable as exc:
                if attempt == len(delays):
                    raise exc.error from exc.__cause__
                log.info("connect_retry", host=label, attempt=attempt + 1,
                         delay=round(delays[attempt], 2), error=str(exc.error))
                await asyncio.sleep(delays[attempt])
        self.connect_attempts += attempt + 1
        presented = conn.get_server_host_key()
        if presented is not None and keys.is_revoked(presented.public_data):  # a certificate's signing key is checked by asyncssh
            conn.close()
            raise HostKeyError(f"host key of {label} ({host.hostname}:{host.port}) is revoked in known_hosts")
        _check_host_ip(conn, host, presented, label)
        if accept_unknown and presented is not None:
            name = _lookup_name(host)
            assert record_to is not None
            known_hosts.record_key(record_to, name, presented.export_public_key("openssh").decode().strip(),
                                   hashed=host.hash_known_hosts)
            # Never a silent accept: say which key was trusted, as ssh's "Permanently added".
            log.warning("host_key_accepted", host=label, hostname=host.hostname, port=host.port, name=name,
                        fingerprint=str(presented.get_fingerprint("sha256")), known_hosts=record_to, policy=why)
        return conn

    async def _open(self, kwargs: dict[str, object], host: ResolvedHost, label: str, timeout: float,
                    why: str, keys: known_hosts.HostKeys) -> asyncssh.SSHClientConnection:
        """One connection attempt; errors worth another attempt come out as :class:`_Retryable`."""
        where = f"{host.hostname}:{host.port}"
        direct = "tunnel" not in kwargs and "proxy_command" not in kwargs
        unlisted: list[asyncssh.SSHKey] = []  # the key the host sent, when known_hosts does not list it
        try:
            options = _with_loaded_keys(kwargs)
            options["client_factory"] = functools.partial(options["client_factory"], unlisted=unlisted)  # type: ignore[arg-type]
            if options.get("client_keys"):
                options["client_keys"] = _rsa_size_allowed(options["client_keys"], host.required_rsa_size)  # type: ignore[arg-type]
            options, agent = await _with_agent_keys(options, host.required_rsa_size, timeout)
            try:
                if direct:  # ssh's own connect: its attempts, its words (transport.dial)
                    options.pop("local_addr", None)
                    options["sock"] = await dial(host.hostname, host.port, attempts=host.connection_attempts,
                                                 timeout=timeout, label=label, local_addr=host.bind_address)
                return await asyncssh.connect(host.hostname, **options)  # type: ignore[arg-type]  # kwargs built above
            except BaseException:
                if options.get("sock") is not None:
                    options["sock"].close()  # type: ignore[attr-defined]  # (a no-op once asyncssh closed it)
                raise
            finally:
                if agent is not None:
                    agent.close()  # signing is over once connect returns (no agent forwarding)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _host_key_refusal(exc, unlisted, keys, host, f"{label} ({where})", why) from exc
        except asyncssh.PermissionDenied as exc:
            raise AuthError(f"{label} refused authentication for {host.user}@{where}: {exc.reason}") from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise AuthError(f"cannot use the private key for {label}: {exc}") from exc
        except (TimeoutError, asyncio.TimeoutError) as exc:
            # The TCP connection was made (dial) or is a tunnel's: what did not come is SSH's answer.
            raise ConnectError(f"{label} ({where}) did not answer the SSH handshake within {timeout:g}s "
                               "(ssh: Connection timed out during banner exchange)",
                               hint="something that is not sshd, or an sshd too busy to answer, holds that port: "
                                    "`ssh -v HOST true` shows where it stops") from exc
        except asyncssh.ConnectionLost as exc:
            # sshd closes a connection past MaxStartups before its banner: worth a retry.
            error = ConnectError(f"{label} ({where}) closed the connection during the SSH handshake "
                                 "(ssh: Connection closed by remote host)")
            raise _Retryable(error) from exc
        except asyncssh.KeyExchangeFailed as exc:
            raise ConnectError(
                f"SSH to {label} failed: {exc.reason}",
                hint="the server offers none of the algorithms ssh allows (`ssh HOST true` is refused too); if you "
                     "trust it, allow one it offers under its Host line in the SSH config: `KexAlgorithms +NAME` "
                     "(or Ciphers, MACs, HostKeyAlgorithms)",
            ) from exc
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH to {label} failed: {exc.reason}") from exc
        except socket.gaierror as exc:
            raise ConnectError(f"cannot resolve {host.hostname} for {label}: {exc.strerror}") from exc
        except OSError as exc:
            error = ConnectError(f"cannot reach {label} ({where}): {system_words(exc)}")
            if isinstance(exc, ConnectionError) or exc.errno in _RETRYABLE_ERRNOS:
                raise _Retryable(error) from exc
            raise error from exc
        except ValueError as exc:
            raise ConfigError(f"bad SSH settings for {label}: {exc}") from exc

    async def close(self) -> None:
        for conn in [self._conn, *reversed(self._jumps)]:
            if conn is None:
                continue
            conn.close()
            try:
                async with asyncio.timeout(5):
                    await conn.wait_closed()
            except (TimeoutError, asyncio.TimeoutError):
                pass
        self._conn = None
        self._jumps = []

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        hold_stdin: bool = False,
        first_line: FirstLine | None = None,
    ) -> CommandResult:
        if self._conn is None:
            raise TransportError(f"not connected to {self.name}")
        self.sessions_opened += 1
        try:
            proc = await self._conn.create_process(_command_line(argv, env), encoding=None)
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH session to {self.name} failed: {exc.reason}") from exc

        out, err = BoundedSink(), BoundedSink()
        watch = FirstLineWatch(first_line, out, asyncio.get_running_loop().time(), timeout)
        after_mark = _AfterBeginMark(watch)  # (the first line is the command's, after the mark)
        guard = GuardNote(err) if first_line else None

        async def read_stdout() -> None:
            await pump(proc.stdout, after_mark)  # type: ignore[arg-type]  # SSHReader reads like a StreamReader
            after_mark.close()

        try:
            # One timeout scope, not a task per step: at 1,000 hosts each task counts.
            async with asyncio.timeout_at(watch.deadline()) as scope:
                watch.on_change = lambda: None if scope.expired() else scope.reschedule(watch.deadline())
                if stdin:
                    proc.stdin.write(stdin)  # buffered by the channel, sent as the window allows
                if not hold_stdin:
                    proc.stdin.write_eof()
                await asyncio.gather(read_stdout(), pump(proc.stderr, guard or err))  # type: ignore[arg-type]  # (as above)
                if guard:
                    guard.close()
                completed = await proc.wait()
            if watch.broken:
                await self._stop_guarded(guard)
                raise watch.error(self.name, err.value()[0], timeout)
            status = completed.exit_status
            if status is None:  # killed by a signal on the host
                status = 128 + _signal_number(completed.exit_signal)
            (stdout, out_cut), (stderr, err_cut) = out.value(), err.value()
            return CommandResult(tuple(argv), status, stdout, stderr, out_cut or err_cut)
        except (TimeoutError, asyncio.TimeoutError):
            if watch.waiting or watch.refused:
                # Not envdoctor's program: nothing of it to let end on its own.
                _stop(proc, "KILL")
                await self._stop_guarded(guard)
                raise watch.error(self.name, err.value()[0], timeout) from None
            _stop(proc)
            raise CommandTimeout(
                f"{argv[0]} did not finish within {timeout:g}s on {self.name}"
            ) from None
        except (asyncssh.Error, ConnectionError) as exc:
            raise ConnectError(f"connection to {self.name} dropped: {exc}") from exc
        except BaseException:
            _stop(proc)  # Ctrl-C, a fleet deadline: the command must not outlive us
            raise

    async def _stop_guarded(self, guard: GuardNote | None) -> None:
        """Have the host-side guard of a command that is not envdoctor's program end its process
        group now (sshd refuses a root login's signal: see _stop); at worst it does so at its
        bound (transport/first_line.py)."""
        if guard is None or not guard.pid or self._conn is None:
            return
        try:
            async with asyncio.timeout(GUARD_STOP_SECONDS):
                await self._conn.run(_command_line(["sh", "-c", stop_guard_command(guard.pid)], None),
                                     stdin=asyncssh.DEVNULL)
        except (asyncssh.Error, OSError, TimeoutError):
            pass

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
        self.sessions_opened += 1
        try:
            proc = await self._conn.create_process(_command_line(argv, env), encoding=None)
        except asyncssh.Error as exc:
            raise ConnectError(f"SSH session to {self.name} failed: {exc.reason}") from exc
        stdout_sink = _AfterBeginMark(on_stdout)
        # stdin stays open (and empty) until the command ends: its EOF tells the host that we left.
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(pump(proc.stdout, stdout_sink), pump(proc.stderr, on_stderr))  # type: ignore[arg-type]  # SSHReader reads like a StreamReader
                stdout_sink.close()
                completed = await proc.wait()
        except TimeoutError:
            proc.close()
            raise CommandTimeout(f"{argv[0]} did not finish within {timeout:g}s on {self.name}") from None
        except (asyncssh.Error, ConnectionError) as exc:
            raise ConnectError(f"connection to {self.name} dropped: {exc}") from exc
        except BaseException:
            # Ctrl-C: closing the channel closes the command's stdin on the host, and the stage
            # supervisor stops its command's own group (no signal: it would end the supervisor).
            proc.close()
            raise
        if completed.exit_status is None:
            return 128 + _signal_number(completed.exit_signal)
        return completed.exit_status


#: Seconds envdoctor gives the command that has a host-side guard end its group.
GUARD_STOP_SECONDS = 5.0


def _stop(proc: asyncssh.SSHClientProcess[bytes], signal_name: str = "INT") -> None:
    """Stop a command envdoctor gives up on: SIGINT to its process group over the channel, as
    a Ctrl-C on the host would (RFC 4254's "signal" request: OpenSSH 9.2 refuses it for a
    root login, "session signalling requires privilege separation", so it is only a first
    try), then the channel closed. Closing is what always works: sshd closes the command's
    stdin, and the command's watchdog (probe/host/guard.py, probe/host/command_watch.py) ends it and all
    it started. An interpreter that never ran envdoctor's program (``signal_name`` KILL: no
    watchdog there) is ended by the host-side guard of transport/first_line.py instead, at
    once when asked (SSHTransport._stop_guarded), at its bound at the latest."""
    try:
        proc.send_signal(signal_name)
    except (asyncssh.Error, OSError, ValueError):
        pass
    proc.close()


_RETRYABLE_ERRNOS = frozenset({errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE})


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


class _HostKeyClient(asyncssh.SSHClient):
    """Decides on a key that known_hosts does not list: accepted only under accept-new (or a
    confirmed ``no``) for a host with no entry at all; asyncssh refuses revoked keys first.
    Holds the host's CASignatureAlgorithms, RevokedHostKeys and RequiredRSASize for
    :func:`_validate_server_host_key`."""

    def __init__(self, accept_unknown: bool, ca_signature_algorithms: Sequence[str] = (),
                 revoked_host_keys: str | None = None, required_rsa_size: int = 1024, *,
                 unlisted: list[asyncssh.SSHKey] | None = None) -> None:
        self.accept_unknown = accept_unknown
        self.ca_signature_algorithms = tuple(ca_signature_algorithms) or algorithms.CA_SIGNATURES.defaults
        self.revoked_host_keys = revoked_host_keys
        self.required_rsa_size = required_rsa_size
        #: Where the key known_hosts does not list is kept, for the refusal to name it.
        self.unlisted = unlisted

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        if self.unlisted is not None:
            self.unlisted.append(key)
        return self.accept_unknown


_asyncssh_validate_server_host_key = asyncssh.SSHClientConnection.validate_server_host_key


def _validate_server_host_key(self: asyncssh.SSHClientConnection, key_data: bytes) -> asyncssh.SSHKey:
    """The host key as ssh judges it, before asyncssh matches it with known_hosts. Three rules
    of ssh's that asyncssh does not have, for envdoctor's connections only (their client is a
    _HostKeyClient):

    - RequiredRSASize: an RSA host key (a certificate's own key too) below it is refused;
    - RevokedHostKeys: a key the file revokes (a certificate: by its bare key, its authority,
      its serial number or key ID) is refused, and so is every key when the file cannot be judged;
    - CASignatureAlgorithms: a certificate its authority signed with an algorithm the list leaves
      out (by default SHA-1 ``ssh-rsa``) vouches for nothing: as ssh does ("Retry with plain
      key"), the bare key is judged instead, and stands only where known_hosts trusts it itself."""
    owner = getattr(self, "_owner", None)
    if not isinstance(owner, _HostKeyClient):
        return _asyncssh_validate_server_host_key(self, key_data)
    bits = rsa_key_bits(key_data)
    if bits is not None and bits < owner.required_rsa_size:
        raise asyncssh.HostKeyNotVerifiable(f"RSA host key of {bits} bits is below RequiredRSASize "
                                            f"{owner.required_rsa_size} (ssh refuses it too)")
    if owner.revoked_host_keys:
        try:
            why = revoked_keys.revocation(owner.revoked_host_keys, revoked_keys.HostKey.of(key_data))
        except revoked_keys.RevocationError as exc:
            raise asyncssh.HostKeyNotVerifiable(f"{exc} (RevokedHostKeys: ssh refuses every host then)") from None
        if why:
            raise asyncssh.HostKeyNotVerifiable(f"{why} (RevokedHostKeys)")
    try:
        cert = asyncssh.public_key.decode_ssh_certificate(key_data)
    except (asyncssh.KeyImportError, ValueError):
        cert = None
    if cert is not None and not cert.is_x509_chain:
        used = certificate_signature_algorithm(cert)
        if used not in owner.ca_signature_algorithms:
            log.warning("host_certificate_ignored", signature=used or "unreadable",
                        allowed=",".join(owner.ca_signature_algorithms),
                        note="its signature algorithm is not in CASignatureAlgorithms; the bare key is judged, as ssh does")
            key_data = cert.key.public_data
    return _asyncssh_validate_server_host_key(self, key_data)


asyncssh.SSHClientConnection.validate_server_host_key = _validate_server_host_key  # type: ignore[method-assign]


def _host_key_refusal(exc: asyncssh.HostKeyNotVerifiable, unlisted: Sequence[asyncssh.SSHKey],
                      keys: known_hosts.HostKeys, host: ResolvedHost, label: str, why: str) -> HostKeyError:
    """A refused host key as ssh tells it: changed (known_hosts lists another key), unknown (it
    lists none), or refused by a rule (revoked, RequiredRSASize...: asyncssh's reason)."""
    name = _lookup_name(host)
    if not unlisted:  # refused before known_hosts was asked: a rule of ssh's, with its own reason
        return HostKeyError(f"host key of {label} is not trusted: {exc.reason} (looked up as {name!r} in "
                            f"{', '.join(host.known_hosts_files) or 'no file'}; {why})")
    sent = unlisted[-1]
    key_type, fingerprint = sent.get_algorithm(), str(sent.get_fingerprint("sha256"))
    if keys.trusted:
        return host_key_refusal.changed_key(label, name, key_type, fingerprint, keys)
    if keys.cert_authorities:
        return host_key_refusal.not_certified(label, name, key_type, fingerprint, keys)
    return host_key_refusal.unknown_key(label, name, key_type, fingerprint,
                                        ", ".join(host.known_hosts_files), why)


def _lookup_name(host: ResolvedHost) -> str:
    return known_hosts.lookup_name(host.hostname, host.port, host.host_key_alias)


def _import_keys(keys: Sequence[known_hosts.KnownKey]) -> list[asyncssh.SSHKey]:
    imported = []
    for key in keys:
        found = _PUBLIC_KEYS.get(key)
        if found is None:
            try:
                found = _PUBLIC_KEYS[key] = asyncssh.import_public_key(key.openssh)
            except (asyncssh.KeyImportError, ValueError):
                log.debug("known_hosts_key_skipped", where=key.where)  # ssh skips keys it cannot read, too
                continue
        imported.append(found)
    return imported


#: known_hosts keys parsed once per run: the hosts of a fleet share a few known_hosts lines
#: (an SSHKey is not changed by being trusted). Keyed by the line's whole value.
_PUBLIC_KEYS: dict[known_hosts.KnownKey, asyncssh.SSHKey] = {}
#: Identity files read once per run, by their paths and file stats (a key replaced during
#: the run is read again): parsing the same private key for each of 1,000 connections was a
#: tenth of the controller's CPU. Each connection gets its own shallow copy of a key pair,
#: since asyncssh sets the signature algorithm it chose with that server on the object.
_IDENTITIES: dict[tuple[object, ...], tuple[list[asyncssh.SSHKeyPair], list[bytes] | None]] = {}


def _file_state(path: str) -> tuple[int, ...] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _with_loaded_keys(kwargs: dict[str, object]) -> dict[str, object]:
    """``kwargs`` with its identity files loaded as asyncssh itself would load them in
    ``connect`` (the same calls, same arguments), from this run's memo. Errors are asyncssh's
    own (KeyImportError and OSError), raised where connect would raise them."""

    paths = list(kwargs.get("client_keys") or ())  # type: ignore[call-overload]  # built by _connect_kwargs
    if not paths:
        return dict(kwargs, client_keys=[])
    wants_identities = "agent_identities" in kwargs
    certificates = list(kwargs.get("client_certs") or ())  # type: ignore[call-overload]  # built by _connect_kwargs
    key = (wants_identities, *((p, _file_state(p), _file_state(p + ".pub"), _file_state(p + "-cert.pub"))
                               for p in paths), *((c, _file_state(c)) for c in certificates))
    found = _IDENTITIES.get(key)
    if found is None:
        from asyncssh.public_key import load_identities

        # As SSHClientConnectionOptions.prepare calls them with no passphrase, ignore_encrypted as
        # given, but skip_public: an IdentityFile ssh cannot sign with (a public key whose private
        # half lives in the agent, as 1Password and Secretive set it up; a key file ssh cannot
        # read) is passed over, as ssh passes it over, where asyncssh would stop. Likewise the
        # CertificateFiles: those ssh could read.
        pairs = asyncssh.load_keypairs(paths, None, _readable_certificates(certificates), True,
                                       bool(kwargs.get("ignore_encrypted")))
        identities = load_identities(paths, False) if wants_identities else None
        found = _IDENTITIES[key] = (list(pairs), identities)
        _note_skipped_identities(paths, found[0])
    # The certificates are paired with the file keys now; with none, with the agent's keys later.
    loaded = dict(kwargs, client_keys=[copy.copy(pair) for pair in found[0]],
                  client_certs=() if found[0] else certificates)
    if found[1] is not None:
        loaded["agent_identities"] = list(found[1])
    return loaded


async def _with_agent_keys(kwargs: dict[str, object], required_rsa_size: int = 1024,
                           timeout: float = 15.0) -> tuple[dict[str, object], asyncssh.SSHAgentClient | None]:
    """When no IdentityFile gives a key to sign with, the agent's keys alone, as ssh offers them.

    asyncssh would read ~/.ssh's default key files for an empty key list, which ssh does not do
    once IdentityFile names others, and it drops the agent for no list at all. So the agent's
    keys (those IdentitiesOnly allows) are fetched here and become the list, paired with the
    CertificateFiles; with neither, public key authentication is off. The agent client is
    returned for the caller to close after the login."""
    if kwargs.get("client_keys") or kwargs.get("public_key_auth") is False:
        return kwargs, None
    path = kwargs.get("agent_path", os.environ.get("SSH_AUTH_SOCK"))
    agent = None
    keys: list[asyncssh.SSHKeyPair] = []
    if path:
        try:
            async with asyncio.timeout(timeout):  # an agent that never answers must not hold the run
                agent = await asyncssh.connect_agent(str(path))
                if agent is not None:
                    keys = _rsa_size_allowed(await agent.get_keys(kwargs.get("agent_identities")),  # type: ignore[arg-type]
                                             required_rsa_size)
        except (OSError, ValueError, asyncssh.Error, TimeoutError) as exc:
            log.warning("agent_unavailable", agent=str(path), error=str(exc) or type(exc).__name__)
            keys = []
    if not keys:
        if agent is not None:
            agent.close()
        return dict(kwargs, client_keys=None, public_key_auth=False), None
    certificates = _readable_certificates(list(kwargs.get("client_certs") or ()))  # type: ignore[call-overload]
    pairs = asyncssh.load_keypairs(keys, None, certificates)
    return dict(kwargs, client_keys=pairs, client_certs=(), agent_path=None), agent


def _note_skipped_identities(paths: Sequence[str], pairs: Sequence[asyncssh.SSHKeyPair]) -> None:
    """Say which IdentityFile gave no key, as ssh says ``Load key "...": invalid format``; a
    public key (the agent holds its private half) is expected and not mentioned."""
    used = {pair.get_comment() for pair in pairs} | {getattr(pair, "_filename", None) for pair in pairs}
    for path in paths:
        if path in used:
            continue
        try:
            asyncssh.read_public_key(path)
            continue  # a public key: only the agent can sign with it
        except (asyncssh.KeyImportError, OSError, ValueError):
            pass
        try:
            asyncssh.read_private_key(path)
        except asyncssh.KeyEncryptionError:
            continue  # needs a passphrase: skipped in batch mode, as ssh skips it
        except (asyncssh.KeyImportError, OSError, ValueError) as exc:
            if "passphrase" in str(exc).lower():
                continue
            log.warning("identity_file_skipped", path=path, error=str(exc), note="ssh skips it too")


def _readable_certificates(paths: Sequence[str]) -> list[str]:
    readable = []
    for path in paths:
        try:
            asyncssh.read_certificate_list(path)
        except (asyncssh.KeyImportError, OSError, ValueError) as exc:
            log.info("certificate_skipped", path=path, error=str(exc))
            continue
        readable.append(path)
    return readable


@functools.lru_cache(maxsize=None)
def _asyncssh_algorithms(kind: str) -> tuple[str, ...]:
    """What asyncssh can do of one kind: ``cipher``, ``kex``, ``mac``, ``host_key``
    (certificates too) or ``signature`` (a client key's)."""
    if kind == "cipher":
        from asyncssh.encryption import get_encryption_algs

        names = list(get_encryption_algs())
    elif kind == "kex":
        from asyncssh.kex import get_kex_algs

        names = list(get_kex_algs())
    elif kind == "mac":
        from asyncssh.mac import get_mac_algs

        names = list(get_mac_algs())
    elif kind == "signature":
        from asyncssh.public_key import get_public_key_algs

        names = list(get_public_key_algs())
    else:
        from asyncssh.public_key import get_certificate_algs, get_public_key_algs

        names = [*get_certificate_algs(), *get_public_key_algs()]
    return tuple(name.decode("ascii") for name in names)


def _host_key_algorithms(host: ResolvedHost, trusted: Sequence[asyncssh.SSHKey],
                         authorities: Sequence[asyncssh.SSHKey]) -> list[str]:
    """The host key algorithms to ask for: ssh's list (``HostKeyAlgorithms``) that asyncssh
    can verify, narrowed, as asyncssh narrows its own, to those of the keys known_hosts has
    for the host (certificates when a CA is trusted for it); all of them for a host not yet
    known. A known key of a type ssh no longer allows (ssh-dss) leaves ssh's whole list: the
    host's other keys are then unknown to known_hosts and refused, as ssh refuses them."""
    allowed = algorithms.usable(algorithms.HOST_KEYS, host.host_key_algorithms, _asyncssh_algorithms("host_key"),
                                host.host)
    known = {name.decode("ascii") for key in trusted for name in key.sig_algorithms}
    if authorities:
        known.update(name for name in allowed if name.endswith("-cert-v01@openssh.com"))
    preferred = [name for name in allowed if name in known]
    return preferred or allowed


def _connect_kwargs(host: ResolvedHost, keys: known_hosts.HostKeys, tunnel: asyncssh.SSHClientConnection | None,
                    timeout: float, keepalive: float, accept_unknown: bool) -> dict[str, object]:
    """asyncssh's options for exactly the resolved values; asyncssh reads no config file itself."""
    identities = list(host.existing_identity_files)
    trusted, authorities = _import_keys(keys.trusted), _import_keys(keys.cert_authorities)
    kwargs: dict[str, object] = {
        "port": host.port,
        "username": host.user,
        "config": [],
        # Matched by us as OpenSSH matches (HostKeyAlias, [host]:port, hashes); a revoked key is refused.
        "known_hosts": (trusted, authorities, _import_keys(keys.revoked)),
        "client_factory": functools.partial(_HostKeyClient, accept_unknown, host.ca_signature_algorithms or (),
                                            host.revoked_host_keys, host.required_rsa_size),
        "connect_timeout": timeout,
        "keepalive_interval": keepalive,
        "client_keys": identities,
        # CertificateFile: each is paired with the key it certifies (ssh offers both).
        "client_certs": list(host.existing_certificate_files),
        "ignore_encrypted": True,  # like ssh in batch mode: a key needing a passphrase is skipped
        # Only what ssh would offer (Ciphers), AES-GCM first on AES hardware (see transport.ciphers).
        "encryption_algs": ciphers.offered(host.ciphers, _asyncssh_algorithms("cipher"), host.host),
        # Nothing else outside ssh's lists either: asyncssh's own defaults include SHA-1 key
        # exchange and ssh-rsa host keys, which OpenSSH no longer accepts (transport.algorithms).
        "kex_algs": algorithms.kex_offered(host.kex_algorithms, _asyncssh_algorithms("kex"), host.host),
        "mac_algs": algorithms.usable(algorithms.MACS, host.macs, _asyncssh_algorithms("mac"), host.host),
        "server_host_key_algs": _host_key_algorithms(host, trusted, authorities),
    }
    # A client key signs only as PubkeyAcceptedAlgorithms allows (not SHA-1 ssh-rsa unless it
    # names it); a list asyncssh can do none of leaves no key to offer, as with ssh.
    signing = algorithms.signature_algorithms(host.pubkey_algorithms, _asyncssh_algorithms("signature"))
    if signing:
        kwargs["signature_algs"] = signing
    else:
        kwargs["public_key_auth"] = False
    if host.identity_agent is not None:
        kwargs["agent_path"] = agent_socket(host.identity_agent)
    if host.host_key_alias:
        kwargs["host_key_alias"] = host.host_key_alias
    if host.identities_only:
        kwargs["agent_identities"] = identities
    if tunnel is not None:
        kwargs["tunnel"] = tunnel
    elif host.proxy_command:
        kwargs["proxy_command"] = proxy_command_argv(host)
    elif host.bind_address:
        kwargs["local_addr"] = (host.bind_address, 0)  # BindAddress: leave from the address ssh would
    if host.bind_interface and tunnel is None and not host.proxy_command:
        log.warning("bind_interface_not_applied", host=host.host, interface=host.bind_interface,
                    note="ssh binds to that interface's address; envdoctor lets the system choose (use BindAddress)")
    _local_user()
    return kwargs


def agent_socket(setting: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The agent socket IdentityAgent names, as ssh reads it (ssh.c): ``none`` is no agent,
    ``SSH_AUTH_SOCK`` the environment's, ``$VAR`` (no braces) the socket that variable names
    (no agent when it is unset), anything else the path itself (already expanded)."""
    if setting == "none":
        return None
    if setting == "SSH_AUTH_SOCK":
        return environ.get("SSH_AUTH_SOCK") or None
    if setting.startswith("$") and not setting.startswith("${"):
        return environ.get(setting[1:]) or None
    return setting


def proxy_command_argv(host: ResolvedHost, environ: Mapping[str, str] = os.environ) -> list[str]:
    """ProxyCommand run as ssh runs it (sshconnect.c): ``exec `` before the command, its tokens
    expanded, and the whole given to the user's shell (``$SHELL -c``, ``/bin/sh`` when SHELL is
    unset or empty): a command written in fish or zsh syntax works as it does with ssh.

    A token ssh does not know (or a lone ``%`` at the end) makes ssh refuse to connect
    ("percent_expand: unknown key %z"); so does this. ``ProxyCommand -`` (the connection on
    ssh's own standard input and output) has no meaning for envdoctor: refused too."""
    command = host.proxy_command or ""
    if command.strip() == "-":
        raise ConfigError(f"{host.host}: ProxyCommand - (the connection on ssh's standard input and output) "
                          "cannot be used by envdoctor", hint="use a ProxyCommand that connects, or ProxyJump")
    # %k: HostKeyAlias when set, else the name given (as for known_hosts).
    tokens = {"%": "%", "h": host.hostname, "k": host.host_key_alias or host.host, "n": host.host,
              "p": str(host.port), "r": host.user}

    def token(found: re.Match[str]) -> str:
        if found[1] not in tokens:
            shown = f"%{found[1]}" if found[1] else "a lone '%' at its end"
            raise ConfigError(f"{host.host}: ProxyCommand {command!r}: unknown token {shown} (ssh refuses it; "
                              "ProxyCommand knows %%, %h, %k, %n, %p and %r)")
        return tokens[found[1]]

    expanded = re.sub(r"%(.?)", token, "exec " + command, flags=re.DOTALL)
    return [environ.get("SHELL") or "/bin/sh", "-c", expanded]


def _ssh_string(data: bytes, at: int) -> tuple[bytes, int]:
    size = int.from_bytes(data[at:at + 4], "big")
    if at + 4 + size > len(data):
        raise ValueError("truncated")
    return data[at + 4:at + 4 + size], at + 4 + size


def rsa_key_bits(blob: bytes) -> int | None:
    """The modulus size of an RSA public key blob or RSA certificate blob (``ssh-rsa``:
    e then n; a certificate: its nonce, then e and n); None for any other key."""
    try:
        name, at = _ssh_string(blob, 0)
        if name == b"ssh-rsa-cert-v01@openssh.com":
            _, at = _ssh_string(blob, at)  # nonce
        elif name != b"ssh-rsa":
            return None
        _, at = _ssh_string(blob, at)  # e
        modulus, _ = _ssh_string(blob, at)
    except ValueError:
        return None
    return int.from_bytes(modulus, "big").bit_length()


def _rsa_size_allowed(pairs: Sequence[asyncssh.SSHKeyPair], required: int) -> list[asyncssh.SSHKeyPair]:
    """Our own keys as ssh offers them under RequiredRSASize: an RSA key below it is skipped."""
    kept = []
    for pair in pairs:
        bits = rsa_key_bits(pair.key_public_data)
        if bits is not None and bits < required:
            log.info("client_key_skipped", key=pair.get_comment() or "?", bits=bits, required_rsa_size=required)
            continue
        kept.append(pair)
    return kept


def certificate_signature_algorithm(cert: asyncssh.SSHCertificate) -> str | None:
    """The algorithm an OpenSSH certificate's authority signed it with (the last field of the
    certificate: ``string(string(algorithm) string(signature))`` after the CA's key); None when
    the blob is not laid out so."""
    signing = getattr(cert, "signing_key", None)
    if signing is None:
        return None
    data, key = cert.public_data, signing.public_data
    marker = len(key).to_bytes(4, "big") + key
    at = data.rfind(marker)
    if at < 0:
        return None
    rest = data[at + len(marker):]
    size = int.from_bytes(rest[:4], "big")
    signature = rest[4:]
    if len(rest) < 8 or size != len(signature):
        return None
    name_size = int.from_bytes(signature[:4], "big")
    if name_size > len(signature) - 4:
        return None
    return signature[4:4 + name_size].decode("ascii", "replace")


def _check_host_ip(conn: asyncssh.SSHClientConnection, host: ResolvedHost, presented: asyncssh.SSHKey | None,
                   label: str) -> None:
    """CheckHostIP: an entry for the address with another key is refused (ssh warns of DNS
    spoofing; envdoctor, which nobody watches, stops). Off with HostKeyAlias or a proxy."""
    if not host.check_host_ip or host.host_key_alias or host.proxy_command or presented is None:
        return
    peer = conn.get_extra_info("peername")
    if not peer:
        return
    keys = known_hosts.host_keys(host.known_hosts_files, known_hosts.lookup_name(str(peer[0]), host.port, None))
    if keys.trusted and all(k.blob != presented.public_data for k in keys.trusted):
        conn.close()
        raise HostKeyError(f"host key of {label} differs from the key known_hosts has for its address {peer[0]}")
