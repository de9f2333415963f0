"""One ``ssh -G`` process, run so that nothing it starts can hold envdoctor past its deadline.

``ssh -G`` runs ``Match exec`` commands, and such a command's own children inherit ssh's
stderr (ssh points their stdin and stdout at /dev/null, not stderr). Waiting for the pipes to
close, as ``communicate()`` and asyncio's ``Process.wait()`` do, would wait for every such
child: ``exec "sleep 90"`` held a 30 s timeout for 90 s, and a command that never ends held
it forever. So ssh starts in a session of its own; its answer is read until ssh itself
exits (and a moment more for what it wrote last); at the deadline the whole process group
is killed and the pipes are closed without waiting for them.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

#: After ssh exits, how long what it wrote last may take to arrive (a child that kept
#: stderr open is not waited for beyond it).
DRAIN_SECONDS = 0.2
#: How often a wait without output looks whether ssh has exited.
POLL_SECONDS = 0.05
READ_CHUNK = 65536


class SSHGTimeout(Exception):
    """ssh -G did not exit before its deadline (its process group was killed)."""


@dataclass(frozen=True)
class SSHGAnswer:
    returncode: int
    out: bytes
    err: bytes


def start(argv: list[str]) -> subprocess.Popen[bytes]:
    """ssh -G in a new session, so that its process group holds every Match exec command."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to ssh and everything in its process group (the Match exec commands)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # (the group is gone already)
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill ssh and its group, reap ssh, close the pipes (never read to EOF)."""
    kill_group(proc)
    proc.wait()
    _close(proc)


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def collect(proc: subprocess.Popen[bytes], deadline: float, limit: int) -> SSHGAnswer:
    """What ssh printed (each stream kept to ``limit`` bytes) once it exits; SSHGTimeout
    (after :func:`stop`) when it has not exited by ``deadline`` (``time.monotonic``)."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    sizes = dict.fromkeys(chunks, 0)
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            # Once ssh has exited, what it wrote is read even past the deadline (prefetch
            # collects its processes in turn), but no child that kept a pipe open is awaited.
            end = deadline if exited_at is None else exited_at + DRAIN_SECONDS
            if now >= end:
                break
            for key, _ in selector.select(min(end - now, POLL_SECONDS)):
                data = os.read(key.fd, READ_CHUNK)
                if not data:
                    selector.unregister(key.fd)
                elif sizes[key.fd] < limit:
                    chunks[key.fd].append(data[: limit - sizes[key.fd]])
                    sizes[key.fd] += len(data)
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))  # (at once when it has exited)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise SSHGTimeout() from None
    _close(proc)
    assert proc.returncode is not None
    return SSHGAnswer(proc.returncode, b"".join(chunks[out_fd]), b"".join(chunks[err_fd]))

