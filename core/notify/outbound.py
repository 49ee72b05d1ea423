"""Connections to a destination a schedule, a channel or a stored secret chose.

``core.notify.ssrf.vet`` judges the host and gives the addresses it may be reached at; this
module connects to exactly those addresses, never resolving the name again, so that the address
judged is the address connected to. It also says what went wrong with such a connection in
words of our own: a failure names its class, never what the other end sent, because the other
end may be any service of the network (an SSH banner or an HTTP error page must not come back
in a run's or delivery's error).

- ``send_pinned``: an HTTP request (webhooks, the ``openai`` runner), with ``system_tls``;
- ``open_pinned``: a TCP socket (the ``email`` channel's SMTP connection);
- ``http_failure``: the words for an httpx transport error.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
from collections.abc import Sequence

import httpx

from agentcron.core.notify.ssrf import IPAddress


async def send_pinned(
    client: httpx.AsyncClient, request: httpx.Request, addresses: Sequence[IPAddress]
) -> httpx.Response:
    """Send ``request`` (streamed: the caller reads and closes the response) to the first of
    ``addresses`` that accepts a connection.

    The request's URL names the host; it is sent to the address instead, while its ``Host``
    header keeps the URL's authority and, for https, the ``sni_hostname`` extension makes
    httpcore send the name as SNI and verify the certificate against it, exactly as a request
    to the name would. The client must not use a proxy (``trust_env=False``) and must be used
    for one host only: its pool is keyed by address, and a pooled TLS connection made for one
    name must never carry a request for another.

    Raises the last ``httpx.ConnectError``/``httpx.ConnectTimeout`` when no address accepts
    (nothing was sent), and any other httpx error as it comes.
    """
    named = request.url
    if named.scheme == "https":
        request.extensions["sni_hostname"] = named.raw_host.decode("ascii")
    last: httpx.TransportError = httpx.ConnectError("no address to connect to")
    for address in addresses:
        # The Host header was set from the named URL when the request was built.
        request.url = named.copy_with(host=str(address))
        try:
            return await client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            last = exc  # nothing was sent: the next address is safe to try
    raise last


@functools.cache
def system_tls() -> ssl.SSLContext:
    """The verifying TLS context of the system's CAs, built once per process (loading the CA
    bundle costs tens of milliseconds, too much for every attempt). ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` are honoured, as httpx does by default, although a client that connects
    to pinned addresses ignores the rest of the environment (its proxies)."""
    return httpx.create_ssl_context(trust_env=True)


async def open_pinned(
    addresses: Sequence[IPAddress], port: int, connect_timeout: float
) -> socket.socket:
    """A non-blocking TCP socket connected to the first of ``addresses`` that accepts within
    ``connect_timeout`` seconds (each). Raises the last ``OSError`` (``TimeoutError`` included) when
    none does; the caller owns (and closes) the socket returned."""
    loop = asyncio.get_running_loop()
    last: OSError = ConnectionRefusedError("no address to connect to")
    for address in addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(connect_timeout):
                await loop.sock_connect(sock, (str(address), port))
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last


def os_failure(exc: OSError) -> str:
    """An operating-system or TLS error in the system's words: its class and what its error
    number means (``ConnectionRefusedError: Connection refused``), or OpenSSL's reason, without
    the text a library may have wrapped around it."""
    name = type(exc).__name__
    if isinstance(exc, ssl.SSLError) or not exc.errno or exc.errno < 0:
        detail = exc.strerror  # OpenSSL's reason, the resolver's words, or nothing
    else:
        detail = os.strerror(exc.errno)
    return f"{name}: {detail}" if detail else name


def http_failure(exc: httpx.TransportError) -> str:
    """The class of an httpx transport error, with its text when that text is ours or the
    system's (a refused connection, a certificate that does not verify). A protocol error's
    text quotes what the other end sent (``illegal status line: b'SSH-2.0-...'``), so it is
    replaced by what it means."""
    name = type(exc).__name__
    if isinstance(exc, httpx.ProtocolError):
        return f"{name}: the server did not answer in HTTP"
    text = str(exc)
    return f"{name}: {text}" if text else name


__all__ = ["http_failure", "open_pinned", "os_failure", "send_pinned", "system_tls"]
