"""One error tree for envdoctor.

Library code raises these; only the CLI turns them into text (one line plus a hint) and an
exit status. Third-party errors are wrapped with ``raise ... from exc`` so the cause is kept
for ``-v`` output without leaking into the user's report.
"""

from __future__ import annotations


class EnvdoctorError(Exception):
    """Base of every error envdoctor raises on purpose."""

    #: What the user can do about it; printed under the message by the CLI.
    hint: str = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(EnvdoctorError):
    """The command itself was wrong: bad arguments, bad input file (exit status 2)."""


class ConfigError(UsageError):
    """The inventory, the SSH config or a host name could not be understood."""


class TransportError(EnvdoctorError):
    """Talking to a host failed."""


class ConnectError(TransportError):
    """The host could not be reached (DNS, refused, timeout, dropped)."""

    hint = "check that the host is up and that `ssh HOST true` works from this machine"


class AuthError(TransportError):
    """The host answered but refused our credentials."""

    hint = "check User and IdentityFile for this host in ~/.ssh/config (or load the key into ssh-agent)"


class HostKeyError(TransportError):
    """The host's key is not trusted: unknown, revoked, or refused by a rule of ssh's."""

    hint = "verify the host key out of band (`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the host)"


class HostKeyChangedError(HostKeyError):
    """The host presented a key other than the one known_hosts holds for it (never accepted,
    not even with --accept-new)."""


class CommandTimeout(TransportError):
    """A command on the host did not finish within its time limit."""


class ProtocolError(TransportError):
    """A host program's interpreter did not speak envdoctor's protocol: its first line was not
    the program's, or did not come in time (see transport/first_line.py)."""


class ProbeError(EnvdoctorError):
    """The probe ran but its output could not be used."""


class PatchError(EnvdoctorError):
    """A patch could not be applied or reverted safely."""
