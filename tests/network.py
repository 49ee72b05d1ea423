"""The network of a test: DNS answers of its choosing, and a service that is not what the
client expects to talk to.

``resolving(*addresses)`` is a resolver (``core.notify.ssrf.Resolver``) that gives every name
those addresses, so that a test can give a name that never resolves in real DNS (``.test``,
RFC 6761) an address, and prove a connection went to the address that was judged.

``listening(banner)`` serves on 127.0.0.1 (a free port) in the test's event loop: it greets
every connection with ``banner`` (an SSH server's, an HTTP error page, a database's handshake),
then waits for the client to leave, and counts the connections. It stands for any internal
service a destination chosen by a tenant could point at, to prove that nothing connects to it
or that what it says never comes back in an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from ipaddress import ip_address

from agentcron.core.notify.ssrf import IPAddress, Resolver

# Each banner carries "bastion-7f3a", which no error of ours may ever contain.
MARK = "bastion-7f3a"
SSH_BANNER = b"SSH-2.0-OpenSSH_9.6 bastion-7f3a\r\n"
BANNERS = {
    "ssh": SSH_BANNER,
    # A blank line after the banner: an HTTP client then reads it as a whole (bad) response.
    "ssh-http": SSH_BANNER + b"\r\n",
    "http": b"HTTP/1.1 400 Bad Request\r\nServer: nginx/1.25 bastion-7f3a\r\n\r\n",
    "pop3": b"+OK Dovecot bastion-7f3a ready.\r\n",
    "mysql": b"\x00\x00\x00\x4a\x0a8.0.36 bastion-7f3a\x00",
}


@dataclass
class Listener:
    """The service: its port and how many connections it accepted."""

    banner: bytes
    port: int = 0
    connections: int = 0


@asynccontextmanager
async def listening(banner: bytes) -> AsyncIterator[Listener]:
    """Serve ``banner`` to every connection until the block ends; then every connection still
    open is closed, and its handler awaited, before the test's loop can end."""
    listener = Listener(banner)
    handlers: set[asyncio.Task[None]] = set()

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        listener.connections += 1
        try:
            writer.write(banner)
            await writer.drain()
            await reader.read()  # until the client leaves, or the block ends
        except ConnectionError:
            pass
        finally:
            writer.close()

    def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.ensure_future(greet(reader, writer))
        handlers.add(handler)
        handler.add_done_callback(handlers.discard)

    server = await asyncio.start_server(track, "127.0.0.1", 0)
    listener.port = server.sockets[0].getsockname()[1]
    try:
        yield listener
    finally:
        server.close()
        for handler in list(handlers):
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def resolving(*addresses: str) -> Resolver:
    """A resolver that gives every name ``addresses``: the DNS answer of the test."""

    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ip_address(address) for address in addresses]

    return resolve
