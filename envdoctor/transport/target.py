"""Where and how to connect over SSH: plain values, importable without asyncssh.

Kept apart from :mod:`envdoctor.transport.ssh` so that the inventory, the CLI and a run on
the local machine do not pay for importing asyncssh and its cryptography.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


def user_config_path() -> str:
    """The user config plain ``ssh`` reads: in the password database's home, whatever
    ``$HOME`` says (ssh.c builds it from ``pw->pw_dir``)."""
    import pwd

    return os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh", "config")


@dataclass(frozen=True)
class SSHTarget:
    """Where to connect: an alias or hostname, with the user and port given on the command line."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if self.port and ":" in self.host else self.host  # [::1]:22, as it is written
        text = f"{self.user}@{host}" if self.user else host
        return f"{text}:{self.port}" if self.port else text


@dataclass(frozen=True)
class SSHOptions:
    """How to connect; the same for every host of a run."""

    config_files: tuple[str, ...] = field(default_factory=tuple)
    #: ``--connect-timeout``; None lets the config's ConnectTimeout (else the default) decide.
    connect_timeout: float | None = None
    accept_new: bool = False
    #: ``--insecure-no-host-key-check``: the confirmation without which a config's
    #: ``StrictHostKeyChecking no`` is not honoured.
    allow_no_host_key_check: bool = False
    keepalive_interval: float = 15.0
    #: Further connections after one the host accepted and then dropped before the SSH
    #: handshake finished (MaxStartups). A connection that cannot be made at all is tried as
    #: often as the host's ConnectionAttempts says, as ssh tries it.
    connect_retries: int = 3
    #: First pause between attempts, in seconds; doubled each time, with jitter.
    retry_backoff: float = 0.25

    def resolved_config_files(self) -> list[str]:
        if self.config_files:
            return list(self.config_files)
        default = user_config_path()
        return [default] if os.path.isfile(default) else []

    def effective_connect_timeout(self, configured: float | None) -> float:
        """``--connect-timeout`` when given, else the config's ConnectTimeout, else the default."""
        if self.connect_timeout is not None:
            return self.connect_timeout
        return configured if configured is not None else DEFAULT_CONNECT_TIMEOUT


DEFAULT_CONNECT_TIMEOUT = 15.0


@dataclass(frozen=True)
class ResolvedHost:
    """One destination's SSH settings as OpenSSH resolves them (``ssh -G``, or the built-in
    parser when no ssh client is installed), with file names already expanded."""

    host: str
    hostname: str
    port: int
    user: str
    #: Every IdentityFile in order, expanded; :attr:`existing_identity_files` are those ssh uses.
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    #: Every CertificateFile in order, expanded (certificates paired with the keys they certify).
    certificate_files: tuple[str, ...] = ()
    #: The ProxyJump hops as written (``[user@]host[:port]`` or ``ssh://`` URIs), or None.
    proxy_jump: tuple[str, ...] | None = None
    proxy_command: str | None = None
    user_known_hosts_files: tuple[str, ...] = ()
    global_known_hosts_files: tuple[str, ...] = ()
    #: As ``ssh -G`` prints it: ``true``, ``false``, ``ask`` or ``accept-new``.
    strict_host_key_checking: str = "ask"
    host_key_alias: str | None = None
    check_host_ip: bool = False
    #: HashKnownHosts: a key accepted for this host is recorded under a hashed name (``|1|salt|hmac``).
    hash_known_hosts: bool = False
    #: RevokedHostKeys as written (ssh expands nothing in it): a KRL or a list of public keys.
    revoked_host_keys: str | None = None
    #: RequiredRSASize: the fewest bits an RSA key may have, the server's and our own (OpenSSH 9.1+).
    required_rsa_size: int = 1024
    #: BindAddress: the local address the connection leaves from (None: the system's choice);
    #: BindInterface: the interface ssh would bind to (not applied: a warning says so).
    bind_address: str | None = None
    bind_interface: str | None = None
    #: IdentityAgent as ``ssh -G`` prints it (expanded): a socket path, ``none``, ``SSH_AUTH_SOCK``
    #: or ``$VAR``; None when not set (the environment's SSH_AUTH_SOCK, as for ssh).
    identity_agent: str | None = None
    connect_timeout: float | None = None
    #: ConnectionAttempts: how many times the TCP connection is tried, a second apart (ssh's default: once).
    connection_attempts: int = 1
    #: The ciphers ssh would offer, in its order (``Ciphers`` assembled); None: OpenSSH's defaults.
    ciphers: tuple[str, ...] | None = None
    #: Likewise ``KexAlgorithms``, ``MACs``, ``HostKeyAlgorithms`` and ``PubkeyAcceptedAlgorithms``
    #: (transport.algorithms).
    kex_algorithms: tuple[str, ...] | None = None
    macs: tuple[str, ...] | None = None
    host_key_algorithms: tuple[str, ...] | None = None
    pubkey_algorithms: tuple[str, ...] | None = None
    #: ``CASignatureAlgorithms`` assembled (None: OpenSSH's defaults, without SHA-1 ``ssh-rsa``).
    ca_signature_algorithms: tuple[str, ...] | None = None
    #: Which resolver produced this: ``ssh -G`` or ``built-in parser``.
    resolver: str = ""
    #: Where a value came from (``file:line``, ``command line``, ``default``), by field name.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def existing_identity_files(self) -> tuple[str, ...]:
        """The identity files ssh would offer: those that exist, in order (it skips the others)."""
        return tuple(f for f in self.identity_files if f != "none" and os.path.isfile(f))

    @property
    def existing_certificate_files(self) -> tuple[str, ...]:
        """The CertificateFiles that exist (ssh skips the others)."""
        return tuple(f for f in self.certificate_files if os.path.isfile(f))

    @property
    def known_hosts_files(self) -> tuple[str, ...]:
        return tuple(f for f in (*self.user_known_hosts_files, *self.global_known_hosts_files) if f != "none")


@dataclass(frozen=True)
class ConnectionPlan:
    """Where a connection goes: the destination and the jump hosts before it, first hop first."""

    target: ResolvedHost
    jumps: tuple[ResolvedHost, ...] = ()
