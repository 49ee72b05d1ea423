"""The fault proxy itself, against an echo server on loopback (no database needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.faults.proxy import ThreadedProxy, running_proxy


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.fixture
def proxy(echo_port: int) -> Iterator[ThreadedProxy]:
    with running_proxy("127.0.0.1", echo_port) as running:
        yield running


async def connect(proxy: ThreadedProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def roundtrip(proxy: ThreadedProxy, data: bytes = b"ping") -> bytes:
    reader, writer = await connect(proxy)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(data)), 5)
    finally:
        writer.close()


async def is_dead(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """The connection was reset or closed by the proxy: nothing echoes back."""
    try:
        writer.write(b"x")
        await writer.drain()
        return await asyncio.wait_for(reader.read(1), 5) == b""
    except (ConnectionError, OSError):
        return True
    finally:
        writer.close()


async def new_connection_is_dead(proxy: ThreadedProxy) -> bool:
    """A new connection is refused or reset: the reset may come while connecting already."""
    try:
        reader, writer = await connect(proxy)
    except (ConnectionError, OSError):
        return True
    return await is_dead(reader, writer)


async def test_cut_resets_open_and_new_connections_until_restored(proxy: ThreadedProxy) -> None:
    assert proxy.state == "open"
    reader, writer = await connect(proxy)
    writer.write(b"hello")
    assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"  # both ways
    await asyncio.to_thread(proxy.cut)
    assert await is_dead(reader, writer)
    assert await new_connection_is_dead(proxy)
    await asyncio.to_thread(proxy.restore)
    assert await roundtrip(proxy) == b"ping"


async def test_stall_forwards_nothing_until_restored(proxy: ThreadedProxy) -> None:
    reader, writer = await connect(proxy)
    try:
        await asyncio.to_thread(proxy.stall)
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        # A new connection is accepted but not forwarded either.
        late_reader, late_writer = await connect(proxy)
        late_writer.write(b"late")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(late_reader.readexactly(4), 0.5)
        await asyncio.to_thread(proxy.restore)
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"
        assert await asyncio.wait_for(late_reader.readexactly(4), 5) == b"late"
        late_writer.close()
    finally:
        writer.close()
