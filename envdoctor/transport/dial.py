"""The TCP connection to a host, made as ssh makes it (sshconnect.c, ``ssh_connect_direct``).

ssh resolves the name once, then tries each of its addresses in turn, the whole round
``ConnectionAttempts`` times (1 unless the config says more), one second apart; when every
try failed it names the last error as the system words it: ``connect to host H port P:
Connection refused``. asyncssh would connect through asyncio, which words a refusal
``Connect call failed ('H', P)`` and folds several addresses' errors into one without an
errno. Connecting here first also tells a host that never accepted the connection from one
that accepted it and then said nothing: the SSH handshake timed out (see ``ssh.py``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket

from envdoctor.errors import ConnectError
from envdoctor.logsafe import get_logger

log = get_logger(__name__)

#: ssh sleeps one second before each further attempt (sshconnect.c).
RETRY_PAUSE = 1.0


def system_words(exc: OSError) -> str:
    """An error as ssh prints it (``strerror(errno)``): asyncio's own text ("Connect call
    failed ...") is used only when the error carries no errno."""
    if isinstance(exc, socket.gaierror):  # (its errno is an EAI_ code, not one strerror knows)
        return exc.strerror or str(exc)
    if exc.errno:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or type(exc).__name__


def connect_failure(hostname: str, port: int, exc: OSError) -> str:
    """ssh's line for a connection that failed: ``connect to host H port P: <reason>``."""
    return f"connect to host {hostname} port {port}: {system_words(exc)}"


def resolve_failure(hostname: str, exc: socket.gaierror) -> str:
    """ssh's line for a name that does not resolve: ``Could not resolve hostname H: <reason>``."""
    return f"Could not resolve hostname {hostname}: {exc.strerror or exc}"


async def dial(hostname: str, port: int, *, attempts: int, timeout: float, label: str,
               local_addr: str | None = None) -> socket.socket:
    """A connected, non-blocking socket to ``hostname``:``port``, tried as ssh tries: every
    address, ``attempts`` times, each connect within ``timeout`` seconds. A failure is a
    :class:`ConnectError` in ssh's words (after ``cannot reach LABEL: ``)."""
    try:
        addresses = await _addresses(hostname, port)
    except socket.gaierror as exc:
        raise ConnectError(f"cannot reach {label}: {resolve_failure(hostname, exc)}") from exc
    attempts = max(1, attempts)
    last: OSError = OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH))  # (no address at all)
    for attempt in range(attempts):
        if attempt:
            log.info("connect_retry", host=label, attempt=attempt + 1, of=attempts,
                     error=connect_failure(hostname, port, last), delay=RETRY_PAUSE)
            await asyncio.sleep(RETRY_PAUSE)
        for family, kind, proto, _, address in addresses:
            try:
                return await _connect_one(family, kind, proto, address, timeout, local_addr)
            except OSError as exc:
                last = exc
                log.debug("connect_failed", host=label, address=str(address[0]), error=system_words(exc))
    tried = f" ({attempts} attempts, ConnectionAttempts {attempts})" if attempts > 1 else ""
    raise ConnectError(f"cannot reach {label}: {connect_failure(hostname, port, last)}{tried}") from last


async def _addresses(hostname: str, port: int) -> list[tuple[int, int, int, str, tuple[object, ...]]]:
    """getaddrinfo's answer: an address (most fleets' HostName) at once, a name in a worker
    thread (a DNS lookup must not hold the event loop, and a thread per host costs CPU)."""
    try:
        return socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        return await asyncio.get_running_loop().getaddrinfo(hostname, port, type=socket.SOCK_STREAM)


async def _connect_one(family: int, kind: int, proto: int, address: tuple[object, ...], timeout: float,
                       local_addr: str | None) -> socket.socket:
    """One address: a timeout is ``Connection timed out`` (ETIMEDOUT), as ssh's timeout_connect sets it."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        if local_addr:  # BindAddress: leave from the address ssh would
            bound = await loop.getaddrinfo(local_addr, 0, family=family, type=kind)
            sock.bind(bound[0][4])
        try:
            async with asyncio.timeout(timeout):
                await loop.sock_connect(sock, address)
        except TimeoutError:
            raise TimeoutError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT)) from None
    except BaseException:
        sock.close()
        raise
    return sock
