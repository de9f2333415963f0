"""The local machine as a host: argv run with asyncio subprocesses, no shell in between."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence

from envdoctor.errors import CommandTimeout, TransportError
from envdoctor.transport.first_line import FirstLine, FirstLineWatch, GuardNote
from envdoctor.transport.interface import MAX_OUTPUT_BYTES, BoundedSink, CommandResult, OutputSink, Transport

async def read_bounded(stream: asyncio.StreamReader | None, limit: int = MAX_OUTPUT_BYTES) -> tuple[bytes, bool]:
    """Read a stream to its end, keeping at most ``limit`` bytes. Returns (data, truncated)."""
    kept = BoundedSink(limit)
    await pump(stream, kept)
    return kept.value()


class LocalTransport(Transport):
    """Runs commands on this machine. The environment is inherited, as a login would."""

    def __init__(self, name: str = "local") -> None:
        self.name = name

    @property
    def destination(self) -> str:
        return f"local:{os.path.expanduser('~')}"  # (the probe keeps its programs under ~)

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
        full_env = {**os.environ, **env} if env else None
        if hold_stdin and stdin is None:
            stdin = b""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                start_new_session=True,  # so a timeout can stop the whole process group
            )
        except FileNotFoundError:
            return CommandResult(tuple(argv), 127, b"", f"{argv[0]}: not found\n".encode())
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]} locally: {exc}") from exc

        loop = asyncio.get_running_loop()
        out, err = BoundedSink(), BoundedSink()
        watch = FirstLineWatch(first_line, out, loop.time(), timeout)
        errors: OutputSink = GuardNote(err) if first_line else err

        async def communicate() -> CommandResult:
            async def feed() -> None:
                if proc.stdin is None:
                    return
                try:
                    proc.stdin.write(stdin or b"")
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the command did not want all of its input; its exit status says why
                finally:
                    if not hold_stdin:
                        proc.stdin.close()

            await asyncio.gather(feed(), pump(proc.stdout, watch), pump(proc.stderr, errors))
            if isinstance(errors, GuardNote):
                errors.close()
            status = await proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()  # (held open until now: see Transport.run)
            if watch.broken:
                raise watch.error(self.name, err.value()[0], timeout)
            (stdout, out_cut), (stderr, err_cut) = out.value(), err.value()
            return CommandResult(tuple(argv), status, stdout, stderr, out_cut or err_cut)

        try:
            async with asyncio.timeout_at(watch.deadline()) as scope:
                watch.on_change = lambda: None if scope.expired() else scope.reschedule(watch.deadline())
                return await communicate()
        except (TimeoutError, asyncio.CancelledError) as exc:
            if proc.stdin is not None:
                proc.stdin.close()
            _kill_group(proc)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            if watch.waiting or watch.refused:
                raise watch.error(self.name, err.value()[0], timeout) from None
            raise CommandTimeout(f"{argv[0]} did not finish within {timeout:g}s on {self.name}") from None

    async def stream(
        self,
        argv: Sequence[str],
        *,
        on_stdout: OutputSink,
        on_stderr: OutputSink,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        full_env = {**os.environ, **env} if env else None
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=full_env, start_new_session=True,
            )
        except FileNotFoundError:
            on_stderr(f"{argv[0]}: not found\n".encode())
            return 127
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]} locally: {exc}") from exc
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(pump(proc.stdout, on_stdout), pump(proc.stderr, on_stderr))
                return await proc.wait()
        except BaseException as exc:  # timeout, Ctrl-C: the command must not outlive us
            # EOF on stdin first: a supervisor (see envdoctor.stages.handoff) stops its own process group.
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STREAM_GRACE_SECONDS)
            except (TimeoutError, asyncio.CancelledError):
                pass
            _kill_group(proc)
            await proc.wait()
            if isinstance(exc, TimeoutError):
                raise CommandTimeout(f"{argv[0]} did not finish within {timeout:g}s on {self.name}") from None
            raise


#: How long a streamed command may take to stop after its stdin closed, before SIGKILL.
STREAM_GRACE_SECONDS = 5.0


async def pump(stream: asyncio.StreamReader | None, sink: OutputSink) -> None:
    """Hand a stream's chunks to ``sink`` as they arrive, until its end."""
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        sink(chunk)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
