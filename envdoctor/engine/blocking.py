"""``check`` on this machine without an event loop.

Checking the local machine is one probe command: there is nothing to do concurrently, and
importing asyncio is a third of envdoctor's start-up. So ``check local`` runs the same
coroutines as a fleet run (HostRun, gather_facts, run_probe) through :func:`drive`, with a
transport whose ``run`` finishes before it returns: nothing ever suspends. Everything else
(remote hosts, ``fix``, audits, stages) keeps asyncio.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envdoctor.errors import CommandTimeout, TransportError
from envdoctor.transport.first_line import FirstLine, FirstLineWatch, GuardNote
from envdoctor.transport.interface import MAX_OUTPUT_BYTES, BoundedSink, CommandResult, OutputSink, Transport

if TYPE_CHECKING:
    from envdoctor.inventory import HostSpec


class _Outcome(Protocol):
    @property
    def ok(self) -> bool: ...


T = TypeVar("T")
R = TypeVar("R", bound=_Outcome)

#: Bytes written to the command's stdin at a time (a pipe holds 64 KiB).
_WRITE_CHUNK = 1 << 16


class DeadlineExceeded(Exception):
    """The host's whole time budget (--timeout) ran out, not one command's own limit."""


class Suspended(RuntimeError):
    """A coroutine run by :func:`drive` awaited something that needs an event loop (a bug)."""


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (its awaits are all on blocking transports)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise Suspended("a blocking local run awaited something that needs an event loop")


def drive_each(specs: Sequence[HostSpec], timeout: float | None,
               work: Callable[[HostSpec, Transport], Coroutine[Any, Any, R]], *,
               timed_out: Callable[[HostSpec], R], failed: Callable[[HostSpec, Exception], R],
               progress: Callable[[str, str], None] | None = None) -> list[R]:
    """``work(spec, transport)`` for each local spec, one after the other, each driven to its
    end over a BlockingLocalTransport whose deadline is ``timeout`` from its start. A host
    past its deadline gives ``timed_out(spec)``, any other failure ``failed(spec, exc)``;
    a coroutine that needs an event loop is envdoctor's own bug and is raised."""
    results = []
    for spec in specs:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            result = drive(work(spec, BlockingLocalTransport(spec.name, deadline)))
        except DeadlineExceeded:
            result = timed_out(spec)
        except Suspended:
            raise
        except Exception as exc:  # one host's failure is its result, as in a fleet run
            result = failed(spec, exc)
        if progress:
            progress(spec.name, "done" if result.ok else "problems")
        results.append(result)
    return results


class BlockingLocalTransport(Transport):
    """This machine, with each command run to its end before ``run`` returns.

    Like :class:`envdoctor.transport.local.LocalTransport`: argv without a shell, the
    environment inherited, output kept up to MAX_OUTPUT_BYTES per stream, a timeout stops the
    command's whole process group. ``deadline`` (time.monotonic) bounds every command too;
    reaching it raises :class:`DeadlineExceeded`."""

    def __init__(self, name: str = "local", deadline: float | None = None) -> None:
        self.name = name
        self.deadline = deadline

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

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
        limit, budget = timeout, False
        if hold_stdin and stdin is None:
            stdin = b""
        if self.deadline is not None:
            left = max(0.0, self.deadline - time.monotonic())
            if limit is None or left < limit:
                limit, budget = left, True
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, **env} if env else None,
                start_new_session=True,  # so a timeout can stop the whole process group
            )
        except FileNotFoundError:
            return CommandResult(tuple(argv), 127, b"", f"{argv[0]}: not found\n".encode())
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]} locally: {exc}") from exc
        out, err = BoundedSink(MAX_OUTPUT_BYTES), BoundedSink(MAX_OUTPUT_BYTES)
        watch = FirstLineWatch(first_line, out, time.monotonic(), timeout)
        errors = GuardNote(err) if first_line else None
        try:
            _exchange(proc, stdin, None if limit is None else time.monotonic() + limit, hold_stdin, watch,
                      errors or err)
            if errors:
                errors.close()
        except subprocess.TimeoutExpired:
            _stop(proc)
            if watch.overdue(time.monotonic()):
                raise watch.error(self.name, err.value()[0], timeout) from None
            if budget:
                raise DeadlineExceeded() from None
            raise CommandTimeout(f"{argv[0]} did not finish within {timeout:g}s on {self.name}") from None
        except BaseException:  # Ctrl-C: the command must not outlive us
            _stop(proc)
            raise
        status = proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()  # (held open until now: see Transport.run)
        if watch.broken:
            raise watch.error(self.name, err.value()[0], timeout)
        (stdout, out_cut), (stderr, err_cut) = out.value(), err.value()
        return CommandResult(tuple(argv), status, stdout, stderr, out_cut or err_cut)

    async def stream(
        self,
        argv: Sequence[str],
        *,
        on_stdout: OutputSink,
        on_stderr: OutputSink,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        result = await self.run(argv, stdin=b"", env=env, timeout=timeout)
        on_stdout(result.stdout)
        on_stderr(result.stderr)
        return result.exit_status


def _exchange(proc: subprocess.Popen[bytes], data: bytes | None, until: float | None, hold_stdin: bool,
              stdout: FirstLineWatch, stderr: OutputSink) -> None:
    """Feed stdin (closed after the data unless ``hold_stdin``) and hand both outputs to their
    sinks to their ends before ``until``; raises subprocess.TimeoutExpired after it, or as soon
    as ``stdout``'s first line is refused or overdue (its deadline)."""
    sinks: dict[Any, OutputSink] = {proc.stdout: stdout, proc.stderr: stderr}
    view, sent = memoryview(data or b""), 0
    with selectors.DefaultSelector() as selector:
        if proc.stdin is not None:
            if view:
                selector.register(proc.stdin, selectors.EVENT_WRITE)
            elif not hold_stdin:
                proc.stdin.close()
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            ends = [t for t in (until, None if stdout.spoken else stdout.deadline()) if t is not None]
            wait = min(ends) - time.monotonic() if ends else None
            if wait is not None and wait <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            for key, _ in selector.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        sent += os.write(key.fd, view[sent:sent + _WRITE_CHUNK])
                    except BrokenPipeError:
                        sent = len(view)  # the command did not want all of it; its status says why
                    if sent >= len(view):
                        selector.unregister(proc.stdin)
                        if not hold_stdin:
                            proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                sinks[key.fileobj](chunk)
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    if until is not None:
        proc.wait(max(0.0, until - time.monotonic()))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
