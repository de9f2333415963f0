"""The one interface every way of reaching a host implements.

A command is always an argv list. Whether it runs through ``execve`` (local) or a remote
login shell (SSH), its arguments are quoted here, in :func:`shell_join`, and nowhere else.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from envdoctor.errors import TransportError
from envdoctor.probe.host import program_text
from envdoctor.transport.first_line import FirstLine

#: Receives a command's output chunk by chunk, as :meth:`Transport.stream` reads it.
OutputSink = Callable[[bytes], None]

#: How much of a command's output we keep; the rest is dropped with a marker. A host that
#: prints gigabytes must not take the controller's memory with it.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024

#: In the environment of the commands a run starts on a host that must end with it (the
#: probe, pip, the patch writer) and so of everything they start: which run a process
#: belongs to. ENVDOCTOR_RUN_ID of envdoctor's own environment when set (tests find a run's
#: leftovers by it), else random per envdoctor process.
RUN_ID = os.environ.get("ENVDOCTOR_RUN_ID") or os.urandom(8).hex()
RUN_MARKER = {"ENVDOCTOR_RUN_ID": RUN_ID}


class BoundedSink:
    """An OutputSink that keeps at most ``limit`` bytes; ``truncated`` once any was dropped."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False

    def __call__(self, chunk: bytes) -> None:
        if len(chunk) > self.limit - self.kept:
            self.truncated, chunk = True, chunk[: self.limit - self.kept]
        if chunk:
            self.chunks.append(chunk)
            self.kept += len(chunk)

    def value(self) -> tuple[bytes, bool]:
        return b"".join(self.chunks), self.truncated


@dataclass(frozen=True)
class CommandResult:
    """What one command did on a host."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def stderr_tail(self, lines: int = 5) -> str:
        """The last few lines of stderr, decoded leniently, for error messages."""
        text = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return "\n".join(text[-lines:])


def shell_join(argv: Sequence[str]) -> str:
    """Quote an argv for a POSIX shell: the single place remote arguments are quoted.

    Refuses NUL bytes, which no shell argument can carry, rather than truncating silently.
    """
    for arg in argv:
        if "\x00" in arg:
            raise TransportError(f"argument contains a NUL byte: {arg!r}")
    return " ".join(shlex.quote(arg) for arg in argv)


class Transport(ABC):
    """A connection to one host. Open with ``async with``; every step reuses it."""

    #: The name the user gave for the host (for messages), not necessarily its address.
    name: str

    @property
    def destination(self) -> str:
        """Who this transport reaches, for what the controller remembers of a host between
        runs (probe/held.py): the name, unless the transport knows better."""
        return self.name

    async def __aenter__(self) -> Transport:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @abstractmethod
    async def connect(self) -> None:
        """Open the connection; raise ConnectError, AuthError or HostKeyError."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection; safe to call twice."""

    @abstractmethod
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
        """Run argv on the host and wait for it. A non-zero exit is a result, not an error.

        With ``hold_stdin`` the command's stdin stays open after ``stdin`` until the command
        ends: its EOF then tells the host that envdoctor went away (interrupted, timed out or
        killed), and a watchdog there (the probe's, or probe/host/command_watch.py) ends the command and
        everything it started. On a timeout or an interrupt the command is stopped as well.

        With ``first_line`` the command must print that line first, within its bound
        (transport/first_line.py: FirstLineWatch, the same in every transport): output that is
        not it, or none in time, stops the command at once and raises ProtocolError. The line
        is not part of the result's stdout."""

    async def stream(
        self,
        argv: Sequence[str],
        *,
        on_stdout: OutputSink,
        on_stderr: OutputSink,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        """Run argv, handing its output to the sinks as it comes; returns its exit status.

        stdin stays open, with no data, until the command ends, so that a command can tell by
        EOF that the client went away (Ctrl-C, a dropped connection) and stop what it started.
        This fallback delivers the output at the end, for transports that cannot stream;
        local and ssh override it."""
        result = await self.run(argv, env=env, timeout=timeout)
        on_stdout(result.stdout)
        on_stderr(result.stderr)
        return result.exit_status

    async def read(self, path: str, *, timeout: float | None = None) -> bytes:
        """The bytes of a file on the host."""
        result = await self.run(["cat", "--", path], timeout=timeout)
        if not result.ok:
            raise TransportError(f"cannot read {path} on {self.name}: {result.stderr_tail(1)}")
        return result.stdout

    async def write_atomic(
        self, path: str, data: bytes, *, python: str, mode: int = 0o644, timeout: float | None = None
    ) -> None:
        """Replace ``path`` with ``data`` so that a reader sees the old or the new bytes, never a mix.

        Runs a few lines of the host's own Python (temporary file in the same folder, fsync,
        rename, fsync of the folder), because neither ``cat >`` nor SFTP alone give that
        guarantee across an interrupted connection.
        """
        # The length and hash travel in argv: a connection cut mid-transfer gives the host's
        # writer an early EOF, and without them it would install the truncated bytes.
        digest = hashlib.sha256(data).hexdigest()
        result = await self.run(
            [python, "-I", "-c", program_text(("patch.atomic_write",), "write_from_stdin"), path, oct(mode),
             str(len(data)), digest],
            stdin=data,
            timeout=timeout,
        )
        if not result.ok:
            raise TransportError(f"cannot write {path} on {self.name}: {result.stderr_tail(1)}")
