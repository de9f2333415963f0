"""Where and how to connect over SSH: plain values, importable without asyncssh.

Kept apart from :mod:`envdoctor.transport.ssh` so that the inventory, the CLI and a run on
the local machine do not pay for importing asyncssh and its cryptography.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")


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
    #: Further connect attempts after a refused or dropped (never a timed-out) connection.
    connect_retries: int = 3
    #: First pause between attempts, in seconds; doubled each time, with jitter.
    retry_backoff: float = 0.25

    def resolved_config_files(self) -> list[str]:
        if self.config_files:
            return list(self.config_files)
        default = DEFAULT_SSH_CONFIG.expanduser()
        return [str(default)] if default.is_file() else []
