"""The webhook channel against a real HTTP receiver on loopback.

The receiver is a ``ThreadingHTTPServer`` in a background thread: it records every connection
and request and verifies each signature with the reference ``standardwebhooks`` library, so a
signing mistake on our side cannot be hidden by a matching mistake in the test. Answers are
scripted per request (a status, or ``HANG`` to keep the request open past the timeout).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from standardwebhooks import Webhook

from agentcron.core.errors import RunPermanentError
from agentcron.core.notify import register_notifier
from agentcron.core.notify.base import DeliveryRequest
from agentcron.core.notify.delivery import deliver_run
from agentcron.core.notify.webhook import WebhookNotifier
from agentcron.core.retry import RetryPolicy
from agentcron.core.runs import run_view
from agentcron.core.storage.database import Database
from tests.e2e.conftest import free_port
from tests.integration.delivery_kit import (
    CA,
    PRIVATE_HOSTS,
    created,
    dns_for,
    finished_run,
    schedule_body,
    server_context,
)
from tests.integration.engine_kit import API, assert_error, deliveries_of
from tests.network import BANNERS, MARK, listening, resolving

HANG = "hang"
FAST = RetryPolicy(max_attempts=3, base=0.01)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


# -- the receiver -------------------------------------------------------------------------


@dataclass
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    payload: Any = None  # what ``Webhook.verify`` returned, when it verified
    verify_error: str | None = None


@dataclass
class Receiver:
    """A real HTTP(S) server on loopback that records and verifies webhook deliveries."""

    secret: str
    host: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None
    answers: list[int | str] = field(default_factory=list)  # per request, then 200
    requests: list[Received] = field(default_factory=list)
    connections: int = 0
    sni: list[str | None] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def url(self, path: str = "/hooks/agentcron", host: str | None = None) -> str:
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{name}:{self.port}{path}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                record = Received(self.path, headers, body)
                try:
                    record.payload = Webhook(receiver.secret).verify(body, headers)
                except Exception as exc:
                    record.verify_error = repr(exc)
                with receiver._lock:
                    receiver.requests.append(record)
                    answer = receiver.answers.pop(0) if receiver.answers else 200
                if answer == HANG:
                    receiver.release.wait(10)  # the client gives up first; then we leave
                    self.close_connection = True
                    return
                self.send_response(int(answer))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output clean

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in receiver.host else socket.AF_INET

            def get_request(self) -> tuple[socket.socket, Any]:
                conn, address = super().get_request()
                with receiver._lock:
                    receiver.connections += 1
                return conn, address

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and hung up is expected here

        self._server = Server((self.host, 0), Handler)
        if self.tls is not None:

            def remember_sni(_sock: ssl.SSLObject, name: str, _ctx: ssl.SSLContext) -> None:
                self.sni.append(name)

            self.tls.sni_callback = remember_sni
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def request_for(url: str, secret: str, *, allow_private: bool = True) -> DeliveryRequest:
    channel = {"type": "webhook", "url": url, "secret": secret}
    body = {"type": "run.finished", "schedule": {}, "run": {}}
    request_id = f"{uuid.uuid4()}.0"
    return DeliveryRequest(request_id, channel, body, Path("."), allow_private=allow_private)


# -- one delivery, straight to the notifier (the bytes and headers: test_run_is_delivered_once) --


async def test_an_ipv6_receiver_is_reached_through_its_pinned_address(secret: str) -> None:
    try:
        server = Receiver(secret, host="::1").start()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with server:
        await WebhookNotifier().deliver(request_for(server.url(), secret))
        assert [r.headers["host"] for r in server.requests] == [f"[::1]:{server.port}"]
        assert server.requests[0].verify_error is None


async def test_the_whole_attempt_has_a_deadline(receiver: Receiver, secret: str) -> None:
    receiver.answers = [HANG]
    with pytest.raises(TimeoutError, match=r"no answer within 0\.3 s"):
        await WebhookNotifier(timeout=5, deadline=0.3).deliver(request_for(receiver.url(), secret))


@pytest.mark.parametrize(
    ("status", "permanent"),
    [(500, False), (502, False), (503, False), (429, False), (408, False)]
    + [(400, True), (401, True), (404, True), (410, True), (422, True)]
    + [(301, True), (302, True), (307, True)],
)
async def test_status_classification(
    receiver: Receiver, secret: str, status: int, permanent: bool
) -> None:
    receiver.answers = [status]
    with pytest.raises(Exception) as caught:
        await WebhookNotifier().deliver(request_for(receiver.url(), secret))
    assert isinstance(caught.value, RunPermanentError) is permanent
    assert str(status) in str(caught.value) and secret not in str(caught.value)
    assert len(receiver.requests) == 1  # a redirect is never followed


async def test_a_closed_port_or_an_unresolvable_name_is_a_transient_connection_error(
    secret: str,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/"  # a port nobody listens on
    with pytest.raises(ConnectionError, match="cannot connect"):
        await WebhookNotifier().deliver(request_for(url, secret))
    with pytest.raises(ConnectionError, match="cannot resolve no-such-host.invalid"):
        await WebhookNotifier().deliver(request_for("https://no-such-host.invalid/h", secret))


@pytest.mark.parametrize("banner", BANNERS.values(), ids=BANNERS.keys())
async def test_a_service_that_is_not_http_is_named_never_quoted(secret: str, banner: bytes) -> None:
    """With private destinations allowed by the operator, a webhook may point at any service
    of the network: what it says must not come back in the delivery's error."""
    async with listening(banner) as service:
        notifier = WebhookNotifier(timeout=0.5)
        with pytest.raises(Exception) as caught:
            await notifier.deliver(request_for(f"http://127.0.0.1:{service.port}/hook", secret))
    assert service.connections >= 1
    assert MARK not in str(caught.value) and "nginx" not in str(caught.value), caught.value


# -- TLS: the pinned connection still checks the certificate against the name --------------


def tls_receiver(secret: str, name: str) -> Receiver:
    return Receiver(secret, tls=server_context(name)).start()


async def test_https_to_a_vetted_address_sends_sni_and_verifies_the_name(
    secret: str,
) -> None:
    trusting = ssl.create_default_context()
    CA.configure_trust(trusting)
    notifier = WebhookNotifier(verify=trusting, resolver=resolving("127.0.0.1"))
    with tls_receiver(secret, "hooks.example.test") as server:
        await notifier.deliver(request_for(server.url(host="hooks.example.test"), secret))
        assert server.sni == ["hooks.example.test"]
        assert [r.verify_error for r in server.requests] == [None]
        assert server.requests[0].headers["host"] == f"hooks.example.test:{server.port}"
    # A certificate for another name is refused, before any request.
    with tls_receiver(secret, "other.example.test") as server:
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await notifier.deliver(request_for(server.url(host="hooks.example.test"), secret))
        assert server.requests == []


# -- SSRF ---------------------------------------------------------------------------------


@PRIVATE_HOSTS
async def test_private_destinations_are_refused_before_any_connection(
    receiver: Receiver, secret: str, host: str, said: str
) -> None:
    request = request_for(f"http://{host}:{receiver.port}/hook", secret, allow_private=False)
    with pytest.raises(RunPermanentError) as caught:
        await WebhookNotifier(resolver=dns_for(host)).deliver(request)
    message = caught.value.message
    assert said in message, message
    assert "AGENTCRON_ALLOW_PRIVATE_WEBHOOKS=1" in message and secret not in message
    await asyncio.sleep(0.05)
    assert (receiver.connections, receiver.requests) == (0, [])


PRIVATE_URLS = [
    "http://127.0.0.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://localhost:8080/hook",
    "https://hooks.localhost/hook",
    "http://[::1]/hook",
    "http://[::ffff:10.0.0.1]/hook",
    "http://10.1.2.3/hook",
    "http://2130706433/hook",
]
MALFORMED_URLS = [
    "http://[::1/hook",
    "http://example.org:99999/hook",
    "http://exa mple.org/hook",
    "http://-bad.example.org/hook",
    "http://exa%2fmple.org/hook",
]


@pytest.mark.parametrize("backend", ["sqlite"])  # refused before anything is stored
async def test_private_urls_are_refused_at_creation(client: httpx.AsyncClient) -> None:
    for url in PRIVATE_URLS + MALFORMED_URLS:
        body = schedule_body(notify=hook(url, new_secret()))
        response = await client.post(f"{API}/schedules", json=body)
        error = assert_error(response, 422, "InvalidSchedule", field="notify.0.url")["error"]
        hint = "AGENTCRON_ALLOW_PRIVATE_WEBHOOKS=1" in error["message"]
        assert hint is (url in PRIVATE_URLS), error
    # A name is judged when it is resolved, at delivery, not at creation.
    await created(client, schedule_body(notify=hook("https://hooks.example.org/x", new_secret())))


# -- through deliver_run: attempts recorded on the delivery row ------------------------------


def hook(url: str, secret: str) -> list[dict[str, Any]]:
    return [{"type": "webhook", "url": url, "secret": secret}]


@pytest.mark.parametrize("backend", ["sqlite"])  # delivery logic, not storage
async def test_run_is_delivered_once_with_the_documented_body(
    db: Database, receiver: Receiver, secret: str, tmp_path: Path
) -> None:
    url = receiver.url("/hooks/agentcron?tenant=7")
    run = await finished_run(db, hook(url, secret), "digest ☕")
    before = int(time.time())
    await deliver_run(db, run, run_view(run), tmp_path, policy=FAST, allow_private=True)
    (row,) = await deliveries_of(db, run.id)
    assert (row.status, row.attempts, row.error) == ("delivered", 1, None)
    assert row.target == receiver.url()  # the query may hold a token: not shown

    assert receiver.connections == 1
    (got,) = receiver.requests
    assert got.verify_error is None and got.path == "/hooks/agentcron?tenant=7"
    # The exact bytes signed, with the standard headers.
    assert got.body == json.dumps(got.payload, separators=(",", ":"), ensure_ascii=False).encode()
    assert got.headers["webhook-id"] == f"{run.id}.0"
    assert before <= int(got.headers["webhook-timestamp"]) <= int(time.time())
    assert got.headers["webhook-signature"].startswith("v1,")
    assert got.headers["content-type"] == "application/json"
    assert got.headers["user-agent"].startswith("agentcron")
    assert got.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert secret not in json.dumps(got.headers)
    body = got.payload
    assert set(body) == {"type", "schedule", "run"} and body["type"] == "run.finished"
    assert body["schedule"] == {"id": str(run.schedule_id), "name": "digest ☕"}
    assert body["run"]["id"] == str(run.id) and body["run"]["status"] == "succeeded"
    assert body["run"]["output"] == "five bullets" and body["run"]["trigger"] == "manual"
    assert "T" in body["run"]["created_at"]  # ISO 8601, as the API writes times


@pytest.fixture
def webhook_timeout() -> Iterator[Callable[[float], None]]:
    """Sets the registered webhook channel's timeout for this test only."""
    try:
        yield lambda seconds: register_notifier(WebhookNotifier(timeout=seconds))
    finally:
        register_notifier(WebhookNotifier())


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("answers", "allow_private", "status", "attempts", "error"),
    [
        ([503, 503], True, "delivered", 3, None),
        ([400], True, "failed", 1, "400"),
        ([HANG] * 3, True, "failed", 3, r"^TimeoutError: .*timed out"),
        # Stored while private destinations were allowed; the setting was turned off since.
        ([], False, "failed", 1, "loopback"),
    ],
    ids=["5xx-retried", "4xx-final", "timeout-retried", "private-refused-unconnected"],
)
async def test_transient_failures_are_retried_with_the_same_webhook_id(
    db: Database,
    receiver: Receiver,
    secret: str,
    tmp_path: Path,
    webhook_timeout: Callable[[float], None],
    answers: list[int | str],
    allow_private: bool,
    status: str,
    attempts: int,
    error: str | None,
) -> None:
    receiver.answers = list(answers)
    if HANG in answers:
        webhook_timeout(0.2)
    run = await finished_run(db, hook(receiver.url(), secret))
    with structlog.testing.capture_logs() as logs:
        await deliver_run(
            db, run, run_view(run), tmp_path, policy=FAST, allow_private=allow_private
        )
    (row,) = await deliveries_of(db, run.id)
    assert (row.status, row.attempts) == (status, attempts)
    if error is None:
        assert row.error is None
    else:
        assert row.error is not None and re.search(error, row.error), row.error
        assert secret not in row.error
        assert any(entry["event"] == "delivery_failed" for entry in logs)
    sent = attempts if allow_private else 0
    assert receiver.connections == sent
    assert [r.headers["webhook-id"] for r in receiver.requests] == [f"{run.id}.0"] * sent
    assert [r.verify_error for r in receiver.requests] == [None] * sent
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.requests]
    assert stamps == sorted(stamps)  # each attempt signs its own time
    assert secret not in repr(logs) and "five bullets" not in repr(logs)
