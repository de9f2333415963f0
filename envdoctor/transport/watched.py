"""No command envdoctor starts on a host outlives its run: pip and the patch writer run under
the command watch (envdoctor/probe/host/command_watch.py; the probe has its own watchdog,
probe/host/guard.py), and envdoctor holds their stdin open until they end
(``Transport.run(hold_stdin=True)``): at its EOF the watch stops the command's process group.
"""

from __future__ import annotations

from collections.abc import Sequence

from envdoctor.probe.host import program_text
from envdoctor.transport.interface import RUN_MARKER, CommandResult, Transport

#: Seconds between the stop signal and SIGKILL: with envdoctor's own exit, within 2 s.
GRACE_SECONDS = 1.0


def watched_argv(argv: Sequence[str], stdin: bytes | None, *, python: str, stop: str = "TERM",
                 limit: float = 3600.0) -> list[str]:
    """``argv`` under the supervisor, run by ``python`` (an interpreter the user chose: the
    venv's). ``stdin`` is what the command itself reads; ``limit``: seconds before it is stopped
    even while envdoctor waits (the command's own timeout)."""
    return [python, "-I", "-S", "-c", program_text(("command_watch",), "watch"), str(len(stdin or b"")), stop,
            f"{GRACE_SECONDS:g}",
            f"{limit:g}", *argv]


async def run_watched(transport: Transport, argv: Sequence[str], *, python: str, stdin: bytes | None = None,
                      stop: str = "TERM", timeout: float) -> CommandResult:
    """Run ``argv`` on the host under the supervisor; the result is the command's own."""
    result = await transport.run(watched_argv(argv, stdin, python=python, stop=stop, limit=timeout),
                                 stdin=stdin or b"", env=RUN_MARKER, timeout=timeout, hold_stdin=True)
    return CommandResult(tuple(argv), result.exit_status, result.stdout, result.stderr, result.truncated)
