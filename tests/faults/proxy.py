"""A TCP fault proxy for tests: the service talks to PostgreSQL through it, and the test cuts,
stalls and restores the link while the service runs (stdlib only).

``FaultProxy`` listens on a free loopback port and forwards each accepted connection to the
upstream address. ``cut()`` resets every open connection and resets each new one at once (the
database is gone); ``stall()`` keeps connections open but forwards nothing in either direction,
and new connections are accepted but not forwarded (a network partition, a frozen server);
``restore()`` forwards again (stalled bytes flow on; cut connections stay gone).

The proxy runs on an event loop of its own in a background thread (``ThreadedProxy``), so a
test that blocks its own loop for a moment cannot stall the database by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Literal

State = Literal["open", "stalled", "cut"]
CHUNK = 65536


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a crashed peer or a firewall would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forward loopback TCP connections to ``upstream``; see the module docstring."""

    def __init__(self, upstream_host: str = "127.0.0.1", upstream_port: int = 5432) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.state: State = "open"
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._abort_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- faults ---------------------------------------------------------------------------

    def cut(self) -> None:
        """Reset every connection now; reset each new one on arrival until ``restore()``."""
        self.state = "cut"
        self._flowing.set()  # nothing waits on the flow any more: stalled pipes end too
        self._abort_all()

    def stall(self) -> None:
        """Keep connections open but forward nothing until ``restore()``."""
        self.state = "stalled"
        self._flowing.clear()

    def restore(self) -> None:
        self.state = "open"
        self._flowing.set()

    # -- forwarding -----------------------------------------------------------------------

    def _abort_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:  # so close() ends connections still waiting on a stall
            self._tasks.add(me)
            me.add_done_callback(self._tasks.discard)
        if self.state == "cut":
            _reset(writer)
            return
        self._writers.add(writer)
        try:
            await self._flowing.wait()
            if self.state == "cut":
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(writer)
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        pipes = [
            asyncio.ensure_future(self._pipe(reader, up_writer)),
            asyncio.ensure_future(self._pipe(up_reader, writer)),
        ]
        for pipe in pipes:
            self._tasks.add(pipe)
            pipe.add_done_callback(self._tasks.discard)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        # One side ended: end the other (a half-closed PostgreSQL link is a dead one).
        for side in (writer, up_writer):
            self._writers.discard(side)
            side.transport.abort()
        for pipe in pipes:
            pipe.cancel()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(CHUNK):
                await self._flowing.wait()
                if self.state == "cut" or writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()


class ThreadedProxy:
    """A ``FaultProxy`` on its own event loop in a daemon thread, driven from any thread."""

    def __init__(self, upstream_host: str = "127.0.0.1", upstream_port: int = 5432) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy: FaultProxy = self._call(_make(upstream_host, upstream_port))
        self.port = self._call(self.proxy.start())

    def _call(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=30)

    def _do(self, action: str) -> None:
        async def run() -> None:
            getattr(self.proxy, action)()

        self._call(run())

    @property
    def state(self) -> State:
        return self.proxy.state

    def cut(self) -> None:
        self._do("cut")

    def stall(self) -> None:
        self._do("stall")

    def restore(self) -> None:
        self._do("restore")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self.proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _make(host: str, port: int) -> FaultProxy:
    return FaultProxy(host, port)  # built on the proxy's loop, so its Event belongs there


@contextlib.contextmanager
def running_proxy(
    upstream_host: str = "127.0.0.1", upstream_port: int = 5432
) -> Iterator[ThreadedProxy]:
    proxy = ThreadedProxy(upstream_host, upstream_port)
    try:
        yield proxy
    finally:
        proxy.close()
