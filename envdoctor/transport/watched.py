"""No command envdoctor starts on a host outlives its run: pip and the patch writer run under
the command watch (envdoctor/probe/host/command_watch.py; the probe has its own watchdog,
probe/host/guard.py), and envdoctor holds their stdin open until they end
(``Transport.run(hold_stdin=True)``): at its EOF the watch stops the command's process group.
The watch's first line is WATCH_HELLO, within the bound of transport/first_line.py, and
``sh`` starts the host-side guard before the interpreter: one that does not run the watch is
that host's error at once, not a wait for the command's whole timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

from envdoctor.probe.host import program_text
from envdoctor.transport.first_line import GUARD_SH, FirstLine
from envdoctor.transport.interface import RUN_MARKER, CommandResult, Transport

#: Seconds between the stop signal and SIGKILL: with envdoctor's own exit, within 2 s.
GRACE_SECONDS = 1.0


#: The watch's first line (probe/host/command_watch.py prints it before it starts the command).
WATCH_HELLO = b'{"envdoctor_watch": 1}'
#: Runs the host-side guard, then the watch's interpreter: argv GUARD_SECONDS PYTHON ARGS...
_GUARDED = GUARD_SH + 'envdoctor_guard "$1"\nshift\nexec "$@"\n'


def watch_first_line(python: str) -> FirstLine:
    return FirstLine(WATCH_HELLO, f"the interpreter that runs envdoctor's command watch ({python})")


def watched_argv(argv: Sequence[str], stdin: bytes | None, *, python: str, stop: str = "TERM",
                 limit: float = 3600.0) -> list[str]:
    """``argv`` under the supervisor, run by ``python`` (an interpreter the user chose: the
    venv's) after the host-side guard. ``stdin`` is what the command itself reads; ``limit``:
    seconds before it is stopped even while envdoctor waits (the command's own timeout)."""
    return ["sh", "-c", _GUARDED, "envdoctor-watch", watch_first_line(python).guard_seconds(limit),
            python, "-I", "-S", "-c", program_text(("command_watch",), "watch"), str(len(stdin or b"")), stop,
            f"{GRACE_SECONDS:g}", f"{limit:g}", *argv]


async def run_watched(transport: Transport, argv: Sequence[str], *, python: str, stdin: bytes | None = None,
                      stop: str = "TERM", timeout: float) -> CommandResult:
    """Run ``argv`` on the host under the supervisor; the result is the command's own."""
    result = await transport.run(watched_argv(argv, stdin, python=python, stop=stop, limit=timeout),
                                 stdin=stdin or b"", env=RUN_MARKER, timeout=timeout, hold_stdin=True,
                                 first_line=watch_first_line(python))
    return CommandResult(tuple(argv), result.exit_status, result.stdout, result.stderr, result.truncated)
