"""A fault-injection TCP proxy on 127.0.0.1 for the tests and the benchmark.

It sits in front of the test sshd and, per the :class:`Faults` it is given, adds latency in
each direction, cuts a connection after N bytes, accepts and never answers (blackhole), or
trickles bytes slowly. It counts connections (total and at most at once), so a test can
prove how many connections a run opened.

The proxy runs on its own event loop in a daemon thread, so tests and scripts drive it with
plain calls. It is bounded in time: after ``lifetime`` seconds it closes everything and
stops by itself, whatever the caller does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field, replace

CHUNK = 65536


@dataclass(frozen=True)
class Faults:
    """What the proxy does to connections; replaceable while it runs (new connections see it)."""

    #: Seconds added to every chunk going client -> server and server -> client.
    latency_up: float = 0.0
    latency_down: float = 0.0
    #: Close the connection once this many bytes (both directions together) passed.
    cut_after: int | None = None
    #: Only the first N connections are cut (None: every one), so a retry can get through.
    cut_connections: int | None = None
    #: Accept, read and discard, never connect upstream nor answer.
    blackhole: bool = False
    #: Send server -> client at most this many bytes per second, in small pieces.
    trickle_bps: int | None = None
    #: Refuse (accept, then close at once) the first N connections.
    refuse_connections: int = 0
    #: Once cut_after bytes passed, keep the connection open but forward nothing more (a
    #: host that hangs mid-command) instead of cutting it.
    stall: bool = False


@dataclass
class Stats:
    """What the proxy saw; read it from the test thread after the run."""

    connections: int = 0
    active: int = 0
    max_active: int = 0
    cut: int = 0
    refused: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    closed_reasons: list[str] = field(default_factory=list)


class FaultProxy:
    """``with FaultProxy(upstream_port, Faults(...)) as proxy: ... proxy.port ...``"""

    def __init__(self, upstream_port: int, faults: Faults = Faults(), *, upstream_host: str = "127.0.0.1",
                 lifetime: float = 900.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.faults = faults
        self.lifetime = lifetime
        self.stats = Stats()
        self.port = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._client_gone: dict[int, bool] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # --- control from the caller's thread -------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._main, name=f"faultproxy->{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        if self._error is not None:
            raise RuntimeError(f"fault proxy failed to start: {self._error}")
        return self

    def set_faults(self, faults: Faults | None = None, **changes: object) -> None:
        """Change the faults for connections opened from now on."""
        self.faults = replace(faults or self.faults, **changes)  # type: ignore[arg-type]  # dataclass fields

    def cut_all(self) -> int:
        """Drop every open connection now (an RST to both ends); returns how many."""
        if self._loop is None:
            return 0
        future = asyncio.run_coroutine_threadsafe(self._cut_all(), self._loop)
        return future.result(10)

    async def _cut_all(self) -> int:
        writers = list(self._writers)
        for writer in writers:
            writer.transport.abort()
        with self._lock:
            self.stats.cut += len(writers)
        return len(writers)

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = Stats(active=self.stats.active)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the proxy's own thread -----------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.lifetime)
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        faults = self.faults
        with self._lock:
            self.stats.connections += 1
            number = self.stats.connections
            self.stats.active += 1
            self.stats.max_active = max(self.stats.max_active, self.stats.active)
        # "Active" ends when the client hangs up, not when the proxy has finished draining
        # (that lags by the injected latency), so max_active is what the client had open.
        self._client_gone[id(reader)] = False
        try:
            await self._handle(number, faults, reader, writer)
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            self._mark_client_gone(reader)
            del self._client_gone[id(reader)]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    def _mark_client_gone(self, reader: asyncio.StreamReader) -> None:
        if not self._client_gone.get(id(reader), True):
            self._client_gone[id(reader)] = True
            with self._lock:
                self.stats.active -= 1

    async def _handle(self, number: int, faults: Faults, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if number <= faults.refuse_connections:
            with self._lock:
                self.stats.refused += 1
            return
        if faults.blackhole:
            while await reader.read(CHUNK):
                pass
            self._mark_client_gone(reader)
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers.update((writer, up_writer))
        budget = _Budget(faults.cut_after if faults.cut_connections is None or number <= faults.cut_connections else None)
        try:
            pumps = [
                asyncio.create_task(self._pump(reader, up_writer, faults.latency_up, None, budget, "up", faults.stall)),
                asyncio.create_task(self._pump(up_reader, writer, faults.latency_down, faults.trickle_bps, budget, "down",
                                               faults.stall)),
            ]
            done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            # One side finished: let the other drain briefly (a half-close), then cut both.
            if pending and not budget.exhausted:
                _, pending = await asyncio.wait(pending, timeout=2)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            if budget.exhausted and not faults.stall:
                with self._lock:
                    self.stats.cut += 1
                transport = writer.transport
                transport.abort()  # an RST, as a dropped link looks to the client
        finally:
            self._writers.difference_update((writer, up_writer))
            up_writer.close()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, latency: float,
                    bps: int | None, budget: _Budget, direction: str, stall: bool = False) -> None:
        """Copy src to dst; with latency, chunks are queued and delivered in order, each late by
        ``latency``, so a slow link delays data without limiting throughput."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    with contextlib.suppress(OSError, RuntimeError):
                        if dst.can_write_eof():
                            dst.write_eof()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if bps:
                    for start in range(0, len(data), 64):
                        dst.write(data[start:start + 64])
                        await dst.drain()
                        await asyncio.sleep(64 / bps)
                else:
                    dst.write(data)
                    await dst.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                try:
                    data = await src.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                if not data and direction == "up":
                    self._mark_client_gone(src)
                if data:
                    allowed = budget.take(len(data))
                    data = data[:allowed]
                    with self._lock:
                        if direction == "up":
                            self.stats.bytes_up += len(data)
                        else:
                            self.stats.bytes_down += len(data)
                    if data:
                        await queue.put((time.monotonic() + latency, data))
                    if budget.exhausted:
                        if stall:
                            while await src.read(CHUNK):
                                pass  # a hung host: swallow everything, answer nothing
                        return
                else:
                    await queue.put((0.0, b""))
                    await sender
                    return
        finally:
            if not sender.done():
                if budget.exhausted:
                    sender.cancel()
                else:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(sender, 5)
            await asyncio.gather(sender, return_exceptions=True)


class _Budget:
    """Bytes a connection may still pass before it is cut (shared by both directions)."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0

    def take(self, n: int) -> int:
        if self.left is None:
            return n
        allowed = min(n, self.left)
        self.left -= allowed
        return allowed
