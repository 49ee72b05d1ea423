"""The ``email`` channel against a real SMTP server (aiosmtpd) on loopback.

Each test starts its own aiosmtpd ``Controller`` on 127.0.0.1 and a free port (plain, STARTTLS,
implicit TLS, with or without AUTH) whose handler keeps every message and every RCPT it saw,
and can answer scripted replies (550, 451) per recipient. TLS uses a server certificate from a
throw-away CA (``trustme``), made once per session and trusted through the URL's ``ca_file``.
Nothing of ours is mocked: the notifier speaks SMTP and ``deliver_run`` records the attempts
(the engine hands every channel to ``deliver_run`` alike: tests/integration/test_engine.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from agentcron.core.errors import RunPermanentError
from agentcron.core.notify import validate_channels
from agentcron.core.notify.base import DeliveryRequest
from agentcron.core.notify.delivery import deliver_run, delivery_body
from agentcron.core.notify.email.notifier import EmailNotifier
from agentcron.core.notify.email.transport import EmailDeferred
from agentcron.core.retry import RetryPolicy
from agentcron.core.runs import run_view
from agentcron.core.storage.database import Database
from tests.e2e.conftest import free_port
from tests.integration.delivery_kit import CA, PRIVATE_HOSTS, dns_for, finished_run, server_context
from tests.integration.engine_kit import deliveries_of
from tests.network import BANNERS, MARK, SSH_BANNER, listening, resolving

ENV = "AGENTCRON_TEST_SMTP_URL"
SENDER = "agentcron@example.org"
ALICE = "alice@example.org"
BOB = "bob@example.net"
USER = "mailer@example.org"
PASSWORD = "s3cr:et@p%ss/word"  # needs percent-encoding in a URL
OUTPUT = 'Headlines:\n<script>alert("x")</script> & more'
FAST = RetryPolicy(max_attempts=3, base=0.01, cap=0.05)


# -- a real SMTP server -------------------------------------------------------------------


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    login: str | None


@dataclass
class Mailbox:
    """The aiosmtpd handler: keeps what arrives, answers scripted RCPT replies.

    Runs on the controller's thread; the client sees a reply only after the hook returned,
    so anything a test reads after ``deliver`` returned or raised is already recorded.
    """

    messages: list[Received] = field(default_factory=list)
    rcpt: list[str] = field(default_factory=list)
    scripts: dict[str, list[str]] = field(default_factory=dict)
    port: int = 0  # the server's, once started

    def url(self, scheme: str = "smtp", userinfo: str = "", query: str = "") -> str:
        return f"{scheme}://{userinfo}127.0.0.1:{self.port}{'?' + query if query else ''}"

    def answer(self, address: str, *replies: str) -> None:
        """The next RCPT TO ``address`` gets these replies in turn, then ``250``."""
        self.scripts[address] = list(replies)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        self.rcpt.append(address)
        script = self.scripts.get(address)
        if script:
            return script.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes) and envelope.mail_from is not None
        parsed = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        auth = session.auth_data
        login = auth.login.decode() if isinstance(auth, LoginPassword) else None
        tls = session.ssl is not None  # set by STARTTLS
        received = Received(envelope.mail_from, list(envelope.rcpt_tos), parsed, tls, login)
        self.messages.append(received)
        return "250 Message accepted"


class _Controller(Controller):
    """A ``Controller`` on port 0: learns the port the OS picked before its self-check."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]


StartServer = Callable[..., Mailbox]


@pytest.fixture(scope="session")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PEM of the throw-away CA (its certificates are for localhost and 127.0.0.1)."""
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    CA.cert_pem.write_to_path(str(path))
    return path


def local_tls() -> ssl.SSLContext:
    return server_context("localhost", "127.0.0.1")


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start aiosmtpd servers on loopback; every one is stopped at teardown."""
    controllers: list[_Controller] = []

    def start(**smtp_options: Any) -> Mailbox:
        mailbox = Mailbox()
        controller = _Controller(
            mailbox, hostname="127.0.0.1", port=0, server_hostname="localhost", **smtp_options
        )
        controller.start()
        controllers.append(controller)
        mailbox.port = controller.port
        return mailbox

    yield start
    for controller in controllers:
        controller.stop()


@pytest.fixture(autouse=True)
async def settle_closing_connections() -> AsyncIterator[None]:
    """Let the client's closing transports finish before the test's event loop is closed.

    ``SMTP.close()`` only starts closing (a TLS transport even sends close_notify first); in
    the service the loop goes on and completes it, but a test's loop ends right after the last
    await, which would leave the socket to the garbage collector (a ResourceWarning, an error
    here).
    """
    yield
    await asyncio.sleep(0.02)


def authenticator(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
) -> AuthResult:
    ok = isinstance(data, LoginPassword) and data == (USER.encode(), PASSWORD.encode())
    # handled=False: aiosmtpd itself answers 535 to a refusal (True would leave it silent).
    return AuthResult(success=ok, handled=False, auth_data=data if ok else None)


# -- requests and rows --------------------------------------------------------------------


def channel(*to: str) -> dict[str, Any]:
    spec = {"type": "email", "to": list(to or (ALICE,)), "smtp_url_env": ENV, "from": SENDER}
    return validate_channels([spec])[0]


def request(
    *to: str,
    output: str | None = OUTPUT,
    status: str = "succeeded",
    result: dict[str, Any] | None = None,
) -> DeliveryRequest:
    run_id, schedule_id = uuid.uuid4(), uuid.uuid4()
    finished = datetime(2025, 3, 3, 8, 0, 7, tzinfo=UTC)
    view: dict[str, Any] = {"id": run_id, "schedule_id": schedule_id, "trigger": "schedule"}
    view |= {"due_at": finished - timedelta(seconds=7), "finished_at": finished, "attempt": 1}
    error = "exit 3: <boom>" if status == "failed" else None
    view |= {"status": status, "error": error, "output": output, "result": result}
    body = delivery_body(view, schedule_id, "morning <digest>")
    return DeliveryRequest(f"{run_id}.0", channel(*to), body, Path("/nonexistent"))


def stored_url_request(url: str, *, allow_private: bool = False) -> DeliveryRequest:
    """A delivery whose channel reads its SMTP URL from the owner's stored secret ``smtp``:
    the URL is the tenant's choice, not the operator's."""
    spec = {"type": "email", "to": [ALICE], "smtp_url_secret": "smtp", "from": SENDER}
    stored = {"channel": validate_channels([spec])[0], "secrets": {"smtp": url}}
    return dataclasses.replace(request(), allow_private=allow_private, **stored)


def parts(message: EmailMessage) -> tuple[str, str]:
    text, page = message.get_body(("plain",)), message.get_body(("html",))
    assert isinstance(text, EmailMessage) and isinstance(page, EmailMessage)
    # Line ends are CRLF on the wire; compare in Python's newlines.
    return text.get_content().replace("\r\n", "\n"), page.get_content().replace("\r\n", "\n")


# -- the message --------------------------------------------------------------------------


async def test_plain_smtp_delivers_text_and_html_with_a_stable_message_id(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(tls_context=local_tls())  # offers STARTTLS
    monkeypatch.setenv(ENV, server.url("smtp"))
    req = request(ALICE, BOB)
    notifier = EmailNotifier()

    await notifier.deliver(req)
    await notifier.deliver(req)  # a retry after a crash: the same message again

    first, again = server.messages
    # smtp:// means plain, never upgraded: TLS is asked for by the scheme.
    assert (first.mail_from, first.rcpt_tos, first.tls) == (SENDER, [ALICE, BOB], False)
    mail = first.message
    assert mail["From"] == SENDER
    assert mail["To"] == f"{ALICE}, {BOB}"
    assert mail["Subject"] == "[agentcron] morning <digest>: succeeded"
    assert mail["Message-ID"] == f"<agentcron.{req.delivery_id}@example.org>"
    assert mail["Auto-Submitted"] == "auto-generated"
    assert mail["X-Agentcron-Run-Id"] == str(req.body["run"]["id"])
    # Retries are recognisably the same message: receivers can de-duplicate.
    assert again.message["Message-ID"] == mail["Message-ID"]
    assert again.message["Date"] == mail["Date"] == "Mon, 03 Mar 2025 08:00:07 +0000"
    assert mail.get_content_type() == "multipart/alternative"

    text, page = parts(mail)
    assert OUTPUT in text
    for line in (
        f"Run id:      {req.body['run']['id']}",
        "Trigger:     schedule",
        "Due at:      2025-03-03T08:00:00+00:00",
        "Status:      succeeded",
        "Schedule:    morning <digest>",
    ):
        assert line in text
    assert "Result:" not in text and "Result" not in page  # a run without a result
    assert "<script>" not in page and "<digest>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more" in page
    assert "morning &lt;digest&gt;" in page and str(req.body["run"]["id"]) in page


async def test_a_failed_run_shows_its_error_and_its_result_but_no_output(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server()
    monkeypatch.setenv(ENV, server.url("smtp"))
    failed = request(output=None, status="failed", result={"session_id": "<s-81>"})
    await EmailNotifier().deliver(failed)

    mail = server.messages[0].message
    assert mail["Subject"] == "[agentcron] morning <digest>: failed"
    text, page = parts(mail)
    assert "Error:       exit 3: <boom>" in text and "(no output)" in text
    assert "exit 3: &lt;boom&gt;" in page and "(no output)" in page
    assert 'Result:      {"session_id": "<s-81>"}' in text
    assert "{&quot;session_id&quot;: &quot;&lt;s-81&gt;&quot;}" in page


# -- TLS and AUTH -------------------------------------------------------------------------


async def test_starttls_untrusted_or_not_offered_is_permanent(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = start_server(tls_context=local_tls(), require_starttls=True)
    monkeypatch.setenv(ENV, server.url("smtp+starttls"))  # no ca_file: the system store
    with pytest.raises(RunPermanentError, match="TLS certificate of 127.0.0.1:.* not trusted"):
        await EmailNotifier().deliver(request())
    assert server.messages == []
    server = start_server()  # plain only: no STARTTLS in its EHLO
    monkeypatch.setenv(ENV, server.url("smtp+starttls"))
    with pytest.raises(RunPermanentError, match="STARTTLS"):
        await EmailNotifier().deliver(request())
    assert server.rcpt == []  # nothing went out in clear


def credentials(user: str, password: str) -> str:
    return f"{quote(user, safe='')}:{quote(password, safe='')}@"


async def test_starttls_with_a_private_ca_and_percent_encoded_credentials(
    start_server: StartServer, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = {"authenticator": authenticator, "auth_required": True}
    server = start_server(tls_context=local_tls(), require_starttls=True, **auth)
    query = f"ca_file={ca_file}"
    # A wrong password is permanent and never shown.
    wrong = "not-the-password-0451"
    monkeypatch.setenv(ENV, server.url("smtp+starttls", credentials(USER, wrong), query))
    with pytest.raises(RunPermanentError) as failure:
        await EmailNotifier().deliver(request())
    assert "535" in failure.value.message and "AUTH" in failure.value.message
    assert wrong not in str(failure.value) and server.messages == []

    monkeypatch.setenv(ENV, server.url("smtp+starttls", credentials(USER, PASSWORD), query))
    await EmailNotifier().deliver(request())
    [received] = server.messages
    assert (received.login, received.tls, received.rcpt_tos) == (USER, True, [ALICE])
    assert OUTPUT in parts(received.message)[0]


# -- configuration errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://u:hunter2@mail.example.org", "scheme must be smtp"),
        ("smtp://u:hunter2@mail.example.org", "credentials need smtp\\+starttls"),
        ("smtps://u:hunter2@mail.example.org:99999", "valid host and port"),
        ("smtps://u:hunter2@:465", "no host"),
        ("smtps://u:hunter2@mail.example.org:0", "valid host and port"),
        ("smtps://:hunter2@mail.example.org", "password needs a user"),
        ("smtps://u:hunter2@mail.example.org/inbox", "path"),
        ("smtps://u:hunter2@mail.example.org?cafile=/etc/hunter2.pem", "unknown query"),
        ("smtps://u:hunter2@mail.example.org?timeout=0", "timeout must be more than 0"),
        ("smtps://u:hunter2@mail.example.org?timeout=soon", "timeout must be a number"),
        ("smtp://mail.example.org?ca_file=/etc/hunter2.pem", "ca_file needs .* TLS scheme"),
        ("smtps://u:hunter2@mail.example.org?timeout=1&timeout=2", "given twice"),
    ],
)
async def test_a_malformed_url_is_permanent_and_its_value_never_shown(
    url: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, url)
    with pytest.raises(RunPermanentError, match=f"{ENV} does not hold a valid SMTP URL") as err:
        await EmailNotifier().deliver(request())
    text = str(err.value)
    assert "hunter2" not in text and "mail.example.org" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no driver text
    assert re.search(reason, text), text


async def test_a_missing_variable_or_an_unreadable_ca_file_is_permanent(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(RunPermanentError, match=f"environment variable {ENV} .* not set"):
        await EmailNotifier().deliver(request())
    server = start_server()
    monkeypatch.setenv(ENV, server.url("smtps", query=f"ca_file={tmp_path / 'missing.pem'}"))
    with pytest.raises(RunPermanentError, match=f"ca_file given in {ENV} cannot be loaded"):
        await EmailNotifier().deliver(request())


# -- a stored URL is the tenant's choice: judged like a webhook's ----------------------------


@PRIVATE_HOSTS
async def test_a_stored_url_at_a_private_address_is_refused_before_any_connection(
    host: str, said: str
) -> None:
    async with listening(SSH_BANNER) as service:
        url = f"smtp://{host}:{service.port}"
        with pytest.raises(RunPermanentError) as caught:
            await EmailNotifier(resolver=dns_for(host)).deliver(stored_url_request(url))
        await asyncio.sleep(0.05)
        assert service.connections == 0
    message = caught.value.message
    assert said in message and "secret 'smtp'" in message, message
    assert "AGENTCRON_ALLOW_PRIVATE_WEBHOOKS=1" in message
    assert MARK not in message


async def test_the_connection_goes_to_the_address_judged(start_server: StartServer) -> None:
    # ``.test`` never resolves in real DNS (RFC 6761): the mail can only arrive by connecting
    # to the address the notifier's resolver gave and the judgement saw.
    server = start_server()
    notifier = EmailNotifier(resolver=resolving("127.0.0.1"))
    url = f"smtp://mail.example.test:{server.port}"
    await notifier.deliver(stored_url_request(url, allow_private=True))
    [received] = server.messages
    assert received.rcpt_tos == [ALICE]
    unset = dataclasses.replace(stored_url_request(url, allow_private=True), secrets={})
    with pytest.raises(RunPermanentError, match="secret 'smtp'"):
        await notifier.deliver(unset)


async def test_a_pinned_tls_connection_still_checks_the_name(
    start_server: StartServer, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The operator's URL names the server; the connection goes to the address resolved, and
    # the certificate is checked against the name, not the address.
    server = start_server(ssl_context=local_tls())
    notifier = EmailNotifier(resolver=resolving("127.0.0.1"))
    query = f"ca_file={ca_file}"
    monkeypatch.setenv(ENV, f"smtps://mail.example.test:{server.port}?{query}")
    with pytest.raises(RunPermanentError, match="TLS certificate of mail.example.test:.* not"):
        await notifier.deliver(request())
    monkeypatch.setenv(ENV, f"smtps://localhost:{server.port}?{query}&timeout=5")  # certified
    await notifier.deliver(request())
    [received] = server.messages
    assert received.rcpt_tos == [ALICE] and OUTPUT in parts(received.message)[0]


@pytest.mark.parametrize("banner", BANNERS.values(), ids=BANNERS.keys())
async def test_a_service_that_is_not_smtp_is_named_never_quoted(banner: bytes) -> None:
    """With private destinations allowed by the operator, a stored URL may point at any
    service of the network: what it says must not come back in the delivery's error."""
    async with listening(banner) as service:
        url = f"smtp://127.0.0.1:{service.port}?timeout=2"
        with pytest.raises(EmailDeferred) as caught:
            await EmailNotifier().deliver(stored_url_request(url, allow_private=True))
    text = str(caught.value)
    assert "did not answer as an SMTP server" in text, text
    assert MARK not in text and "nginx" not in text and "Dovecot" not in text, text


async def test_a_stored_url_cannot_name_a_file_of_the_services_host(
    ca_file: Path, tmp_path: Path
) -> None:
    """Only the operator's URL may name ``ca_file``: a tenant's would make the service open a
    path of its choosing, and the error would tell what is there."""
    key_file = tmp_path / "service.key"
    key_file.write_text("-----BEGIN PRIVATE KEY-----\n")
    key_file.chmod(0o600)
    # The same words whatever the path is: nothing tells whether it exists or what it is.
    said = (
        "secret 'smtp' does not hold a valid SMTP URL: ca_file names a file on the service's "
        "host, which only the operator's URL (smtp_url_env) may do"
    )
    async with listening(SSH_BANNER) as service:
        # A CA file, a directory, a missing path, a key file.
        for path in (ca_file, tmp_path, tmp_path / "missing.pem", key_file):
            url = f"smtps://127.0.0.1:{service.port}?ca_file={path}"
            with pytest.raises(RunPermanentError) as caught:
                await EmailNotifier().deliver(stored_url_request(url, allow_private=True))
            assert caught.value.message == said, path
            assert caught.value.__cause__ is None and caught.value.__suppress_context__
        assert service.connections == 0


# -- transient failures -------------------------------------------------------------------


async def test_an_unreachable_or_silent_server_is_transient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, f"smtp://127.0.0.1:{free_port()}")
    with pytest.raises(EmailDeferred, match="cannot reach") as failure:
        await EmailNotifier().deliver(request())
    assert not isinstance(failure.value, RunPermanentError)
    # A listening socket nobody accepts from: the kernel completes the TCP handshake, but no
    # greeting ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        monkeypatch.setenv(ENV, f"smtp://127.0.0.1:{silent.getsockname()[1]}?timeout=0.3")
        started = time.monotonic()
        with pytest.raises(EmailDeferred, match="timed out"):
            await EmailNotifier().deliver(request())
        assert time.monotonic() - started < 3


# -- through deliver_run: attempts recorded -----------------------------------------------

NO_SUCH_USER = "550 5.1.1 no such user"
PARTLY = "1 of 2 recipients accepted"
RCPT_REPLIES = [
    # (recipients, scripted RCPT replies, status, attempts, how the error starts and what it
    # says, the recipients of each message the server accepted)
    ([ALICE], {ALICE: [NO_SUCH_USER] * 3}, "failed", 1, ("", ALICE, NO_SUCH_USER), []),
    ([ALICE], {ALICE: ["451 4.7.1 greylisted", "451 4.3.0 busy"]}, "delivered", 3, None, [[ALICE]]),
    ([ALICE], {ALICE: ["451 4.3.0 busy"] * 5}, "failed", 3, ("EmailDeferred: ", "451"), []),
    # Alice gets it once; the retry goes to the deferred recipient only.
    ([ALICE, BOB], {BOB: ["452 4.2.2 mailbox full"]}, "delivered", 2, None, [[ALICE], [BOB]]),
    ([ALICE, BOB], {BOB: [NO_SUCH_USER]}, "failed", 1, (PARTLY, BOB, NO_SUCH_USER), [[ALICE]]),
]


# Deliveries write no SQL of their own: the delivery rows are the contract suite's, on every store.
@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("to", "replies", "status", "attempts", "error", "accepted"),
    RCPT_REPLIES,
    ids=["refused", "greylisted-then-accepted", "always-busy", "partly-busy", "partly-refused"],
)
async def test_a_deferred_recipient_is_retried_and_a_refused_one_fails_the_delivery(
    db: Database,
    tmp_path: Path,
    start_server: StartServer,
    monkeypatch: pytest.MonkeyPatch,
    to: list[str],
    replies: dict[str, list[str]],
    status: str,
    attempts: int,
    error: tuple[str, ...] | None,
    accepted: list[list[str]],
) -> None:
    server = start_server()
    for address, script in replies.items():
        server.answer(address, *script)
    monkeypatch.setenv(ENV, server.url())
    run = await finished_run(db, [channel(*to)], output=OUTPUT)

    await deliver_run(db, run, run_view(run), tmp_path, policy=FAST)

    [row] = await deliveries_of(db, run.id)
    assert (row.channel, row.target) == ("email", "mailto:" + ",".join(to))
    assert (row.status, row.attempts) == (status, attempts)
    if error is None:
        assert row.error is None
    else:
        assert row.error is not None and row.error.startswith(error[0]), row.error
        assert all(word in row.error for word in error[1:]), row.error
    assert [received.rcpt_tos for received in server.messages] == accepted
    for received in server.messages:  # every attempt sends the same message
        assert received.message["Message-ID"] == f"<agentcron.{run.id}.0@example.org>"
        assert received.message["To"] == ", ".join(to)
