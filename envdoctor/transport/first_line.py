"""The first line a host program prints: proof, within a bound, that the interpreter runs it.

The probe and the command watch run with their stdin held open until they end (so that a
watchdog on the host stops them when envdoctor goes away). An interpreter that does not run
them (a broken or hostile ``python`` in a venv: one that reads its stdin to the end before it
answers, one that stays silent) would then hold its host, and the fleet's report, until
``--timeout``. So each of these programs prints a fixed first line as soon as it runs (the
probe's bootstrap once it has read the request line, the watch before it starts its
command), and every transport's ``run`` enforces it the same way, with :class:`FirstLineWatch`
in front of the command's stdout: a first byte that differs from that line stops the command
at once; no whole line within ``FIRST_LINE_SECONDS`` (or the command's own timeout when that
is shorter) stops it then. Either is the host's :class:`~envdoctor.errors.ProtocolError`,
naming what was received (bounded, escaped). The line itself is not part of the command's
output.

On the host, :data:`GUARD_SH` (run by ``sh`` before the interpreter starts) ends the command's
whole process group at the same bound unless the program cancels it, so what an interpreter
that never ran envdoctor's program started is gone too, even where the controller cannot
signal it (OpenSSH refuses signals to a root login's session) or has gone away. The guard
announces its pid on stderr (:class:`GuardNote` takes that line out of the command's stderr),
so a transport that cannot signal the command's group asks the guard to end it at once
(:func:`stop_guard_command`: SIGUSR1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from envdoctor.errors import ProtocolError
from envdoctor.safe_text import escape_line

#: Receives the command's output after the first line (interface.OutputSink).
OutputSink = Callable[[bytes], None]

#: Seconds a host program has to print its first line, from the start of its command: a
#: Python that takes 20 s to start from a loaded NFS home stays well within it.
FIRST_LINE_SECONDS = 60.0
#: Bytes of what an interpreter printed (and of its stderr) kept for the error.
SHOWN_BYTES = 200

#: The host-side guard: defines ``envdoctor_guard SECONDS``, for ``sh`` to call right before
#: it runs the interpreter. It starts a subshell that, while the shell's process ($$, the
#: interpreter once sh has exec'd it) lives, waits SECONDS and then SIGKILLs the process group
#: (the session sshd or the local transport made for the command), unless SIGTERM (sent by the
#: program once it printed its first line, to the pid in ENVDOCTOR_GUARD) ends it and its sleep
#: first; SIGUSR1 makes it end the group at once. Its output goes to /dev/null, so it never
#: holds the command's pipes open; the shell prints its pid on stderr (GUARD_NOTE).
GUARD_SH = ("envdoctor_guard(){ (x(){ kill $s;exit 0;};y(){ kill -KILL 0;};trap x TERM;trap y USR1;n=$1;"
            "while [ $n -gt 0 ]&&kill -0 $$;do sleep 1& s=$!;wait $s;n=$((n-1));done;"
            "[ $n -gt 0 ]||y)</dev/null >/dev/null 2>&1& ENVDOCTOR_GUARD=$!;export ENVDOCTOR_GUARD;"
            "echo envdoctor-guard $ENVDOCTOR_GUARD >&2;}\n")
#: The line the guard's shell prints on stderr, before the pid.
GUARD_NOTE = b"envdoctor-guard "
#: Seconds the host-side guard waits beyond the controller's bound: the controller, which
#: can say what it received, is the first to give up.
GUARD_MARGIN = 2


@dataclass(frozen=True)
class FirstLine:
    """The line a command must print first (without its newline), what the command is (for
    the error), and within how many seconds."""

    line: bytes
    what: str
    within: float = FIRST_LINE_SECONDS

    def bound(self, timeout: float | None) -> float:
        """Never more than the command's own timeout."""
        return self.within if timeout is None else min(self.within, timeout)

    def guard_seconds(self, timeout: float | None) -> str:
        """The host-side guard's bound, in whole seconds, after the controller's."""
        return str(max(1, math.ceil(self.bound(timeout))) + GUARD_MARGIN)


class FirstLineWatch:
    """An OutputSink in front of a command's stdout sink: it holds back the first line,
    compares it byte by byte with the expected one, and passes on all that follows. With no
    expected line it passes everything on.

    ``deadline()`` is when the transport must stop the command (in the clock of ``started``):
    the bound while the line is awaited, the command's timeout once it came, ``started``
    itself once the output is known not to be it. ``on_change`` (set by the transport) is
    called when that changes."""

    def __init__(self, expected: FirstLine | None, sink: OutputSink, started: float, timeout: float | None) -> None:
        self.expected = expected
        self.sink = sink
        self.started = started
        self.timeout = timeout
        self.state = "spoken" if expected is None else "waiting"  # or "refused"
        self.head = b""
        self.received = 0
        self.on_change: Callable[[], None] | None = None

    @property
    def waiting(self) -> bool:
        return self.state == "waiting"

    @property
    def refused(self) -> bool:
        return self.state == "refused"

    @property
    def spoken(self) -> bool:
        return self.state == "spoken"

    @property
    def broken(self) -> bool:
        """At the command's end: whether what it printed is not the line (a command that
        printed nothing at all is left to its exit status and stderr)."""
        return self.refused or (self.waiting and self.received > 0)

    def overdue(self, now: float) -> bool:
        """Whether the line is refused, or still awaited at ``now`` past its bound."""
        deadline = self.deadline()
        return not self.spoken and deadline is not None and now >= deadline

    def deadline(self) -> float | None:
        if self.state == "refused":
            return self.started
        if self.state == "waiting":
            assert self.expected is not None
            return self.started + self.expected.bound(self.timeout)
        return None if self.timeout is None else self.started + self.timeout

    def __call__(self, chunk: bytes) -> None:
        if self.state == "spoken":
            self.sink(chunk)
            return
        self.received += len(chunk)
        if self.state == "refused":
            if len(self.head) < SHOWN_BYTES:
                self.head = (self.head + chunk)[:SHOWN_BYTES]
            return
        assert self.expected is not None
        head = self.head + chunk
        want = self.expected.line + b"\n"
        size = min(len(head), len(want))
        if head[:size] != want[:size]:
            self.state, self.head = "refused", head[:SHOWN_BYTES]
        elif len(head) >= len(want):
            self.state, self.head = "spoken", b""
            if head[len(want):]:
                self.sink(head[len(want):])
        else:
            self.head = head
            return
        if self.on_change is not None:
            self.on_change()

    def error(self, host: str, stderr: bytes, timeout: float | None) -> ProtocolError:
        """The host's error for a command that did not print its first line: what it printed
        (bounded, escaped) and the start of its stderr."""
        assert self.expected is not None
        what = self.expected.what
        shown = _shown(self.head) + ("..." if self.received > len(self.head) else "")
        if self.refused:
            said = f"{what} answered with something that is not envdoctor's protocol: it printed {shown}"
        else:
            said = (f"{what} printed nothing of envdoctor's protocol within {self.expected.bound(timeout):.3g}s"
                    + (f" (it printed {shown})" if self.received else ""))
        if self.received > len(self.head):
            said += f" ({self.received} bytes in all)"
        if stderr.strip():
            said += f"; on stderr: {_shown(stderr.strip())}" + ("..." if len(stderr.strip()) > SHOWN_BYTES else "")
        return ProtocolError(f"{said}; stopped on {host}",
                             hint="that interpreter does not run envdoctor's program: check it by hand "
                                  "(`PYTHON -I -S -c 'print(1)'` on the host) or choose another with --venv")


class GuardNote:
    """An OutputSink in front of a command's stderr sink: it takes out the guard's line
    (``envdoctor-guard PID``, after whatever a login shell's rc files printed) and keeps the
    pid; the rest passes on. Call ``close`` at the stream's end."""

    #: Bytes held back while looking for the line (it comes before the interpreter runs).
    LOOK_BYTES = 4096

    def __init__(self, sink: OutputSink) -> None:
        self.sink = sink
        self.held: bytes | None = b""  # None once found (or given up on)
        self.pid = 0

    def __call__(self, chunk: bytes) -> None:
        if self.held is None:
            self.sink(chunk)
            return
        self.held += chunk
        while self.held is not None and b"\n" in self.held:
            line, _, rest = self.held.partition(b"\n")
            number = line[len(GUARD_NOTE):]
            if line.startswith(GUARD_NOTE) and number.isdigit() and len(number) < 12:
                self.pid, self.held = int(number), None
                if rest:
                    self.sink(rest)
                return
            self.sink(line + b"\n")
            self.held = rest
        if self.held is not None and len(self.held) > self.LOOK_BYTES:
            self.close()

    def close(self) -> None:
        if self.held:
            self.sink(self.held)
        self.held = None


def stop_guard_command(pid: int) -> str:
    """A shell command that has the guard ``pid`` end its command's process group now: only if
    that process is still a guard (its command line holds the guard's function), never another
    process that took the pid since."""
    return f"grep -q envdoctor_guard /proc/{pid}/cmdline 2>/dev/null && kill -USR1 {pid}"


def _shown(data: bytes) -> str:
    return "'" + escape_line(data[:SHOWN_BYTES].decode("utf-8", "replace")) + "'"
