"""The ``webhook`` channel: an HTTP POST of the delivery body, signed per Standard Webhooks.

Receivers verify the signature with any Standard Webhooks library
(``Webhook(secret).verify(body, headers)``) and de-duplicate on ``webhook-id``, which is the
same on every retry of one delivery.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import re
import ssl
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

import httpx

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.notify.base import DeliveryRequest, check_keys, encode_body, required_string
from agentcron.core.notify.outbound import http_failure, send_pinned, system_tls
from agentcron.core.notify.ssrf import (
    ALLOW_HINT,
    IPAddress,
    PrivateDestination,
    Resolver,
    literal_host_kind,
    parse_ip_literal,
    resolve,
    vet,
)
from agentcron.core.secrets.references import check_reference
from agentcron.core.secrets.resolution import reference_name

# A channel's own keys, besides the "type" and "notify_on" every channel has.
FIELDS = frozenset({"url", "secret"})
# Answers worth another attempt: the receiver is overloaded, rate-limits us or gave up
# waiting for the request (408). Every other non-2xx answer is final.
TRANSIENT_STATUS = frozenset({408, 429})
# DNS labels as resolvers accept them (underscores occur in real records), IDNA already applied.
_HOSTNAME = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)(\.(?!-)[a-z0-9_-]{1,63}(?<!-))*\.?", re.I)


def _user_agent() -> str:
    try:
        return f"agentcron/{version('agentcron')} (webhook)"
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "agentcron (webhook)"


USER_AGENT = _user_agent()


class WebhookNotifier:
    """``{"type": "webhook", "url": "https://...", "secret": "whsec_<base64>" | {"secret": NAME}}``.

    A ``{"secret": NAME}`` secret is the schedule owner's stored secret, whose value must be a
    ``whsec_`` secret: checked at each delivery (``signing_secret``).

    ``deliver`` POSTs ``request.body`` as compact JSON with the headers ``webhook-id``
    (``request.delivery_id``), ``webhook-timestamp`` (unix seconds of this attempt) and
    ``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, see ``sign``). A 2xx answer is a
    delivery. Timeouts, connection failures, DNS failures, 408, 429 and 5xx raise a plain
    exception (``TimeoutError`` or ``ConnectionError``: transient, retried by the caller); a
    refused destination, a redirect (never followed) and any other status raise
    ``RunPermanentError``. No error message contains the secret, the body, or the URL's
    credentials or query string.

    The host is resolved once (``core.notify.ssrf.vet``) and the connection goes to one of
    those addresses while the ``Host`` header, TLS SNI and certificate check keep the URL's
    hostname (``core.notify.outbound.send_pinned``). Unless ``request.allow_private``, a
    destination that is not publicly routable is refused before any connection: every address
    must be public. Environment proxies (``HTTPS_PROXY``...) are ignored for the same reason:
    the address we vetted must be the one we connect to. A failure names its class, never what
    a server that is not an HTTP server sent.

    ``timeout`` bounds each network step (connect, each read and write); ``deadline`` bounds
    one whole attempt including DNS. ``verify`` is the TLS trust (True: the system's CAs).
    ``resolver`` maps ``(host, port)`` to addresses; tests pass one to give a name an address.
    """

    name = "webhook"

    def __init__(
        self,
        *,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        deadline: float = 30.0,
        verify: ssl.SSLContext | bool = True,
        resolver: Resolver = resolve,
    ) -> None:
        self.timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.deadline = deadline
        self.verify = verify
        self.resolver = resolver

    def _tls(self) -> ssl.SSLContext | bool:
        """The TLS trust: the context given, none (``verify=False``), or the system's CAs
        (``system_tls``, built once: each attempt has its own client, see ``_post``)."""
        return system_tls() if self.verify is True else self.verify

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        """The normalised channel, or ``InvalidSchedule`` naming ``<field>.url`` or
        ``<field>.secret``. Without ``allow_private``, a host that is ``localhost`` (or under
        it) or a non-public IP literal is refused here; names are judged at delivery, when
        they are resolved."""
        check_keys(channel, FIELDS, field)
        url = required_string(channel, "url", field)
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
            _ = parts.port  # raises ValueError for a port out of range
            # What deliver will parse and resolve: refuse now what it could never send.
            host = httpx.URL(url).raw_host.decode("ascii")
        except (ValueError, httpx.InvalidURL):
            raise InvalidSchedule("url is not a valid URL", field=f"{field}.url") from None
        if parts.scheme not in ("http", "https") or not hostname:
            raise InvalidSchedule("url must be an absolute http(s) URL", field=f"{field}.url")
        if parse_ip_literal(host) is None and not _HOSTNAME.fullmatch(host):
            raise InvalidSchedule("url has an invalid host name", field=f"{field}.url")
        if not allow_private:
            kind = literal_host_kind(hostname)
            if kind is not None:
                raise InvalidSchedule(
                    f"url points to a {kind} address; {ALLOW_HINT}", field=f"{field}.url"
                )
        if isinstance(channel.get("secret"), dict):
            # The owner's stored secret: its value is checked when a delivery resolves it.
            reference = check_reference(channel["secret"], f"{field}.secret")
            return {"type": self.name, "url": url, "secret": reference}
        secret = required_string(channel, "secret", field, max_len=200)
        problem = secret_problem(secret)
        if problem is not None:
            raise InvalidSchedule(f"secret {problem}", field=f"{field}.secret")
        return {"type": self.name, "url": url, "secret": secret}

    def target(self, channel: Mapping[str, Any]) -> str:
        """``scheme://host[:port]/path``: no credentials and no query string, which may hold
        tokens."""
        parts = urlsplit(str(channel["url"]))
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = f":{parts.port}" if parts.port is not None else ""
        except ValueError:
            port = ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    async def deliver(self, request: DeliveryRequest) -> None:
        """POST ``request.body`` once; return on a 2xx answer (contract in the class doc)."""
        target = self.target(request.channel)
        try:
            url = httpx.URL(str(request.channel["url"]))
        except httpx.InvalidURL:
            raise RunPermanentError(f"webhook {target}: the url is not valid") from None
        body = encode_body(request.body)
        deadline = asyncio.timeout(self.deadline)
        try:
            async with deadline:
                addresses = await self._vetted_addresses(url, target, request.allow_private)
                timestamp = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "user-agent": USER_AGENT,
                    "webhook-id": request.delivery_id,
                    "webhook-timestamp": str(timestamp),
                    "webhook-signature": sign(
                        signing_secret(request, target), request.delivery_id, timestamp, body
                    ),
                    **request.trace,  # the receiver's spans join the run's trace
                }
                status, reason = await self._post(url, addresses, headers, body, target)
        except TimeoutError:
            if not deadline.expired():
                raise  # a step's own timeout, already described
            raise TimeoutError(f"webhook {target}: no answer within {self.deadline:g} s") from None
        _judge(status, reason, target)

    async def _vetted_addresses(
        self, url: httpx.URL, target: str, allow_private: bool
    ) -> list[IPAddress]:
        host = url.raw_host.decode("ascii")  # IDNA-encoded, brackets stripped
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            return await vet(host, port, allow_private=allow_private, resolver=self.resolver)
        except PrivateDestination as exc:
            raise RunPermanentError(f"webhook {target} refused: {exc}; {ALLOW_HINT}") from None
        except OSError as exc:
            raise ConnectionError(f"webhook {target}: cannot resolve {host} ({exc})") from exc

    async def _post(
        self,
        url: httpx.URL,
        addresses: list[IPAddress],
        headers: dict[str, str],
        body: bytes,
        target: str,
    ) -> tuple[int, str]:
        """Send to the first vetted address that accepts a connection; ``(status, reason)``."""
        # One client per attempt: ``send_pinned`` wants a client used for one host only.
        async with httpx.AsyncClient(
            timeout=self.timeout, follow_redirects=False, trust_env=False, verify=self._tls()
        ) as client:
            request = client.build_request("POST", url, content=body, headers=headers)
            try:
                response = await send_pinned(client, request, addresses)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise ConnectionError(
                    f"webhook {target}: cannot connect ({http_failure(exc)})"
                ) from exc
            except httpx.TimeoutException as exc:
                raise TimeoutError(f"webhook {target} timed out ({http_failure(exc)})") from exc
            except httpx.TransportError as exc:
                raise ConnectionError(f"webhook {target} failed: {http_failure(exc)}") from exc
            # Never read: the answer's status is all we need, and a receiver must not make
            # us buffer an arbitrarily large body.
            await response.aclose()
            return response.status_code, response.reason_phrase


def _judge(status: int, reason: str, target: str) -> None:
    """Return on 2xx; raise the transient or permanent error the status calls for."""
    if 200 <= status < 300:
        return
    # The reason phrase is the receiver's text: kept short, it ends up in the API and logs.
    answer = f"{status} {reason[:80]}".strip()
    if status >= 500 or status in TRANSIENT_STATUS:
        raise ConnectionError(f"webhook {target} answered {answer}")
    if 300 <= status < 400:
        raise RunPermanentError(f"webhook {target} answered {answer}; redirects are not followed")
    raise RunPermanentError(f"webhook {target} answered {answer}")


def secret_problem(secret: str) -> str | None:
    """What is wrong with a signing secret (``must look like whsec_<base64>``...), or None
    when it is a ``whsec_`` secret of 24-64 bytes. Never quotes the secret."""
    if not secret.startswith("whsec_"):
        return "must look like whsec_<base64>"
    if len(secret) > 200:
        return "must be at most 200 characters"
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        return "is not valid base64 after whsec_"
    if not 24 <= len(key) <= 64:
        return "must decode to 24-64 bytes"
    return None


def signing_secret(request: DeliveryRequest, target: str) -> str:
    """The channel's ``whsec_`` secret: as stored on the channel, or the value of the stored
    secret it refers to, checked now (it was stored as any text). ``RunPermanentError``
    naming the secret, never quoting it, when that value is missing or not a signing secret."""
    secret = request.channel["secret"]
    name = reference_name(secret)
    if name is None:
        return str(secret)
    value = request.secrets.get(name)
    if value is None:
        raise RunPermanentError(f"webhook {target}: secret {name!r} was not resolved")
    problem = secret_problem(value)
    if problem is not None:
        raise RunPermanentError(
            f"webhook {target}: the stored secret {name!r} is not a webhook signing secret: "
            f"it {problem}"
        )
    return value


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks ``webhook-signature`` value ``v1,<base64 signature>``.

    The key is the base64-decoded part of ``secret`` after ``whsec_``; the signed content is
    ``f"{message_id}.{timestamp}."`` followed by ``body``, HMAC-SHA256.
    """
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return f"v1,{base64.b64encode(digest).decode('ascii')}"


__all__ = [
    "USER_AGENT",
    "Resolver",
    "WebhookNotifier",
    "encode_body",
    "secret_problem",
    "sign",
    "signing_secret",
]
