"""The ``email`` channel: the delivery as a plain-text and HTML mail over SMTP.

The channel names where its SMTP URL is: an environment variable of the service
(``smtp_url_env``) or a stored secret of the schedule's owner (``smtp_url_secret``,
``core.secrets``), exactly one of the two. Either is read at every delivery, so a rotated
credential applies without a restart, and the URL is never stored on the channel, logged or
shown: errors name the variable or the secret, never its value. The URL forms are:

- ``smtp://[user[:password]@]host[:port]``: plain SMTP, port 25 by default, never upgraded.
  Credentials are refused on this scheme: they would cross the network in clear text.
- ``smtp+starttls://[user[:password]@]host[:port]``: port 587 by default; the server must offer
  STARTTLS and the upgrade must succeed before anything else (including AUTH) is sent.
- ``smtps://[user[:password]@]host[:port]``: port 465 by default; TLS from the first byte.

There is deliberately no opportunistic upgrade of ``smtp://``: an upgrade a man in the middle
can strip by hiding the STARTTLS capability protects nothing, and a relay whose certificate
cannot be verified would turn a working plain setup into failed deliveries. The scheme says
exactly what happens on the wire.

``user`` and ``password`` are percent-decoded (``%40`` for ``@``, ``%3A`` for ``:``). Query
parameters: ``ca_file=/path/ca.pem`` trusts the CA certificates in that PEM file instead of the
system store (TLS schemes only; for a private CA), ``timeout=<seconds>`` bounds connecting and
each SMTP command (default 30, at most 300). Unknown parameters are refused, so a misspelt
``ca_file`` cannot silently fall back to the system store. Certificates and host names are
always verified.

Outcomes, per the ``Notifier`` contract:

- ``RunPermanentError``: the variable (or secret) is missing or not a valid URL; the CA file
  cannot be loaded; the server's certificate is not trusted; the server lacks STARTTLS, AUTH or
  SMTPUTF8 when needed; any 5xx reply (authentication refused, sender or recipient refused,
  message rejected).
- ``EmailDeferred`` (transient, retried with the shared ``RetryPolicy``): the server cannot be
  reached, the connection drops or times out, any 4xx reply (greylisting, mailbox busy,
  temporary authentication failure, 421 on connect).

A delivery is idempotent by ``delivery_id``: the ``Message-ID`` and ``Date`` headers are
derived from the run, so every retry sends the same message and a receiver can de-duplicate.
When only some recipients are deferred, the retry in this process goes to those alone.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import ssl
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from core.errors import InvalidSchedule, RunPermanentError
from core.logging import get_logger
from core.notify.base import ENV_NAME, DeliveryRequest, check_keys, required_string
from core.secrets import check_name

log = get_logger(__name__)

# A channel's own keys, besides the "type" and "notify_on" every channel has.
FIELDS = frozenset({"to", "smtp_url_env", "smtp_url_secret", "from"})
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DEFAULT_PORTS = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
# Deliveries whose recipients were only partly accepted, remembered so that the retry of the
# same delivery goes to the deferred recipients alone. Bounded: an entry outlives its retries
# only when the process stops retrying (a permanent error pops it too), so a few hundred
# suffice; the oldest is dropped first.
_PARTIAL_MEMORY = 512
_ERROR_TEXT_MAX = 300


class EmailDeferred(Exception):
    """The mail could not be handed over now (SMTP says "deferred"); a later attempt may succeed.

    Transient by the ``Notifier`` contract (it is not a ``RunPermanentError``). The message
    names the server and the reply, never the credentials; the driver exception is the
    ``__cause__``.
    """


@dataclass(frozen=True)
class SmtpSettings:
    """A parsed SMTP URL. ``password`` is kept out of ``repr`` so it cannot reach a log."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def address(self) -> str:
        """``host:port`` as shown in errors (brackets around an IPv6 literal)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_smtp_url(url: str) -> SmtpSettings:
    """Parse one of the SMTP URL forms in this module's docstring.

    Raises ``ValueError`` whose message says what is wrong without quoting any part of the
    URL (which may hold a password), so the caller can show it next to the variable's name.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError("it is not a URL with a valid host and port") from None
    if port == 0:
        raise ValueError("it is not a URL with a valid host and port")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("the scheme must be smtp, smtp+starttls or smtps")
    if not parts.hostname:
        raise ValueError("it names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise ValueError("it must not have a path or a fragment")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and not username:
        raise ValueError("a password needs a user name")
    if username is not None and scheme == "smtp":
        raise ValueError(
            "credentials need smtp+starttls:// or smtps:// (smtp:// would send them in clear)"
        )
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("its query string is malformed") from None
    if set(query) - {"ca_file", "timeout"}:
        # Not named: even a parameter's name is part of the value, which is never shown.
        raise ValueError("unknown query parameter (only ca_file and timeout are known)")
    if any(len(values) > 1 for values in query.values()):
        raise ValueError("a query parameter is given twice")
    ca_file = query.get("ca_file", [None])[0]
    if ca_file is not None and (not ca_file or scheme == "smtp"):
        raise ValueError("ca_file needs a path and a TLS scheme (smtp+starttls or smtps)")
    timeout = DEFAULT_TIMEOUT
    if "timeout" in query:
        try:
            timeout = float(query["timeout"][0])
        except ValueError:
            raise ValueError("timeout must be a number of seconds") from None
        if not 0 < timeout <= MAX_TIMEOUT:  # also refuses NaN
            raise ValueError(f"timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds")
    return SmtpSettings(
        scheme=scheme,
        host=parts.hostname,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        username=username,
        password=password,
        ca_file=ca_file,
        timeout=timeout,
    )


class EmailNotifier:
    """``{"type": "email", "to": [addr], "smtp_url_env": "ENV_NAME", "from": addr}``, or with
    ``"smtp_url_secret": "NAME"`` (a stored secret holding the URL) instead of ``smtp_url_env``.

    See the module docstring for the URL forms, the classification of failures and the
    idempotency of ``deliver``.
    """

    name = "email"

    def __init__(self) -> None:
        # delivery id -> recipients that already accepted the message (see _PARTIAL_MEMORY).
        self._accepted: OrderedDict[str, frozenset[str]] = OrderedDict()

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        """The normalised channel, or ``InvalidSchedule`` naming ``<field>.<key>``."""
        check_keys(channel, FIELDS, field)
        to = channel.get("to")
        if not isinstance(to, list) or not to or len(to) > 50:
            raise InvalidSchedule("to must be a list of 1-50 addresses", field=f"{field}.to")
        for index, address in enumerate(to):
            if not isinstance(address, str) or not _EMAIL.match(address):
                raise InvalidSchedule("not an email address", field=f"{field}.to.{index}")
        source: dict[str, str]
        if "smtp_url_secret" in channel:
            if "smtp_url_env" in channel:
                raise InvalidSchedule(
                    "give smtp_url_env or smtp_url_secret, not both",
                    field=f"{field}.smtp_url_secret",
                )
            name = check_name(channel["smtp_url_secret"], f"{field}.smtp_url_secret")
            source = {"smtp_url_secret": name}
        else:
            env = required_string(channel, "smtp_url_env", field, max_len=200)
            if not ENV_NAME.match(env):
                raise InvalidSchedule(
                    "must name an environment variable", field=f"{field}.smtp_url_env"
                )
            source = {"smtp_url_env": env}
        sender = required_string(channel, "from", field, max_len=320)
        if not _EMAIL.match(sender):
            raise InvalidSchedule("not an email address", field=f"{field}.from")
        return {"type": self.name, "to": list(to), **source, "from": sender}

    def target(self, channel: Mapping[str, Any]) -> str:
        """``mailto:`` and the recipients: where the mail goes, without the server's URL."""
        return "mailto:" + ",".join(channel["to"])

    async def deliver(self, request: DeliveryRequest) -> None:
        """Send the run as one mail to every recipient of the channel.

        After a normal return every recipient's server accepted the message. Raises
        ``RunPermanentError`` or ``EmailDeferred`` as listed in the module docstring. The
        password is used for AUTH only: it is in no message, log line or exception text.
        """
        # Read at each delivery (not at start-up) so a rotated secret applies to the next one.
        if "smtp_url_secret" in request.channel:
            name = str(request.channel["smtp_url_secret"])
            env = f"secret {name!r}"
            settings = smtp_settings_from_secret(name, request.secrets)
        else:
            env = str(request.channel["smtp_url_env"])
            settings = smtp_settings_from_env(env, os.environ)
        sender = str(request.channel["from"])
        recipients = list(dict.fromkeys(str(to) for to in request.channel["to"]))
        already = self._accepted.get(request.delivery_id, frozenset())
        pending = [to for to in recipients if to not in already]
        if not pending:  # every recipient took it on an earlier attempt
            self._accepted.pop(request.delivery_id, None)
            return
        message = compose_message(request.body, request.delivery_id, sender, recipients)
        context = await _tls_context(settings, env)
        secrets = [settings.password] if settings.password else []
        try:
            refused = await _send(settings, context, message, sender, pending)
        except Exception as exc:
            failure = classify(exc, settings, secrets)
            if isinstance(failure, RunPermanentError):
                self._accepted.pop(request.delivery_id, None)
            raise failure from exc
        accepted = already | {to for to in pending if to not in refused}
        if not refused:
            self._accepted.pop(request.delivery_id, None)
            log.info(
                "email_sent",
                delivery_id=request.delivery_id,
                server=settings.address,
                recipients=len(pending),
            )
            return
        detail = "; ".join(
            f"{to} ({_safe_text(f'{code} {text}', secrets)})"
            for to, (code, text) in refused.items()
        )
        summary = f"{len(accepted)} of {len(recipients)} recipients accepted the mail"
        if any(not 500 <= code < 600 for code, _ in refused.values()):
            self._remember(request.delivery_id, frozenset(accepted))
            raise EmailDeferred(f"{summary}; deferred or refused by {settings.address}: {detail}")
        self._accepted.pop(request.delivery_id, None)
        raise RunPermanentError(f"{summary}; refused by {settings.address}: {detail}")

    def _remember(self, delivery_id: str, accepted: frozenset[str]) -> None:
        self._accepted[delivery_id] = accepted
        self._accepted.move_to_end(delivery_id)
        while len(self._accepted) > _PARTIAL_MEMORY:
            self._accepted.popitem(last=False)


def smtp_settings_from_env(env: str, environ: Mapping[str, str]) -> SmtpSettings:
    """The parsed SMTP URL held by ``environ[env]``.

    Raises ``RunPermanentError`` naming ``env`` (never quoting its value) when the variable
    is unset, empty or not one of the URL forms.
    """
    value = environ.get(env, "").strip()
    if not value:
        raise RunPermanentError(f"environment variable {env} (the SMTP URL) is not set")
    try:
        return parse_smtp_url(value)
    except ValueError as exc:
        raise RunPermanentError(
            f"environment variable {env} does not hold a valid SMTP URL: {exc}"
        ) from None  # the cause could carry the value


def smtp_settings_from_secret(name: str, secrets: Mapping[str, str]) -> SmtpSettings:
    """The parsed SMTP URL held by the stored secret ``name`` (resolved into ``secrets``).

    Raises ``RunPermanentError`` naming the secret (never quoting its value) when it was not
    resolved or is not one of the URL forms.
    """
    value = secrets.get(name, "").strip()
    if not value:
        raise RunPermanentError(f"secret {name!r} (the SMTP URL) was not resolved or is empty")
    try:
        return parse_smtp_url(value)
    except ValueError as exc:
        raise RunPermanentError(
            f"secret {name!r} does not hold a valid SMTP URL: {exc}"
        ) from None  # the cause could carry the value


async def _tls_context(settings: SmtpSettings, env: str) -> ssl.SSLContext | None:
    """The verifying TLS context for a TLS scheme, None for plain ``smtp://``."""
    if settings.scheme == "smtp":
        return None
    try:
        # Off the loop: loading the system store or a CA bundle reads files.
        return await asyncio.to_thread(ssl.create_default_context, cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise RunPermanentError(
            f"the ca_file given in {env} cannot be loaded ({type(exc).__name__})"
        ) from exc


async def _send(
    settings: SmtpSettings,
    context: ssl.SSLContext | None,
    message: EmailMessage,
    sender: str,
    recipients: list[str],
) -> dict[str, tuple[int, str]]:
    """Hand ``message`` to the server; return the refused recipients with their replies.

    Raises the driver's exception when the whole transaction fails (every recipient refused
    included); the caller classifies it.
    """
    client = aiosmtplib.SMTP(
        hostname=settings.host,
        port=settings.port,
        username=settings.username,
        password=settings.password,
        use_tls=settings.scheme == "smtps",
        # True makes a missing STARTTLS an error instead of a silent plain session.
        start_tls=settings.scheme == "smtp+starttls",
        tls_context=context,
        timeout=settings.timeout,
    )
    async with client:  # connect, STARTTLS, AUTH; QUIT on the way out
        errors, _ = await client.send_message(message, sender=sender, recipients=recipients)
    return {to: (reply.code, reply.message) for to, reply in errors.items()}


def classify(
    exc: BaseException, settings: SmtpSettings, secrets: Iterable[str] = ()
) -> RunPermanentError | EmailDeferred:
    """Map a failure of the SMTP exchange to the ``Notifier`` contract (module docstring).

    The returned error's message names the server and what it said, with every string in
    ``secrets`` blanked out; raise it ``from exc``.
    """
    where = settings.address
    verify = _untrusted_certificate(exc)
    if verify is not None:
        reason = verify.verify_message or "verification failed"
        return RunPermanentError(f"the TLS certificate of {where} is not trusted: {reason}")
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [refusal.code for refusal in exc.recipients]
        detail = "; ".join(
            f"{r.recipient} ({_safe_text(f'{r.code} {r.message}', secrets)})"
            for r in exc.recipients
        )
        if all(500 <= code < 600 for code in codes):
            return RunPermanentError(f"{where} refused every recipient: {detail}")
        return EmailDeferred(f"{where} deferred or refused every recipient: {detail}")
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        stage = _stage(exc)
        said = _safe_text(f"{exc.code} {exc.message}", secrets)
        text = f"{where} answered {said} to {stage}"
        if 500 <= exc.code < 600:
            return RunPermanentError(text)
        return EmailDeferred(text)  # 4xx, or a reply too garbled to carry a code
    if isinstance(exc, TimeoutError):  # aiosmtplib's timeouts are TimeoutErrors too
        return EmailDeferred(f"timed out talking to {where} (after {settings.timeout:g} s)")
    # aiosmtplib's connect and disconnect errors are ConnectionErrors; a TLS failure other
    # than an untrusted certificate (checked above) is an OSError as well.
    if isinstance(exc, OSError):
        root = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        said = _safe_text(str(root) or type(root).__name__, secrets)
        return EmailDeferred(f"cannot reach or lost the connection to {where}: {said}")
    if isinstance(exc, aiosmtplib.SMTPException):
        # What is left is a capability the URL needs and the server lacks (STARTTLS, AUTH,
        # SMTPUTF8): retrying the same server cannot help.
        said = _safe_text(str(exc), secrets)
        return RunPermanentError(f"{where} cannot take this mail: {said}")
    # Unknown failures stay transient by contract, with the type only: their text is unknown.
    return EmailDeferred(f"unexpected {type(exc).__name__} while sending to {where}")


def _stage(exc: aiosmtplib.SMTPResponseException) -> str:
    """The SMTP step a reply answered, for a readable error."""
    stages: tuple[tuple[type[Exception], str], ...] = (
        (aiosmtplib.SMTPAuthenticationError, "AUTH"),
        (aiosmtplib.SMTPSenderRefused, "MAIL FROM"),
        (aiosmtplib.SMTPRecipientRefused, "RCPT TO"),
        (aiosmtplib.SMTPDataError, "DATA"),
        (aiosmtplib.SMTPHeloError, "EHLO"),
        (aiosmtplib.SMTPConnectResponseError, "the connection"),
    )
    return next((name for kind, name in stages if isinstance(exc, kind)), "a command")


def _untrusted_certificate(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate failure in ``exc``'s cause/context chain, or None.

    aiosmtplib wraps it in ``SMTPConnectError`` for ``smtps`` and lets it through as is after
    STARTTLS; either way it is a configuration problem, not a passing one.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _safe_text(text: str, secrets: Iterable[str]) -> str:
    """Server or driver text fit for a delivery record: secrets blanked, one line, bounded."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_TEXT_MAX else text[: _ERROR_TEXT_MAX - 1] + "…"


# -- the message --------------------------------------------------------------------------


def compose_message(
    body: Mapping[str, Any], delivery_id: str, sender: str, recipients: list[str]
) -> EmailMessage:
    """The mail for one delivery: ``multipart/alternative`` with a text and an HTML part.

    ``body`` is the documented delivery payload. The same inputs give the same
    ``Message-ID`` and ``Date`` (derived from ``delivery_id`` and the run's finish time), so
    a retried delivery is recognisably the same message. Every value is HTML-escaped in the
    HTML part; header values are folded to one line.
    """
    schedule = body.get("schedule") or {}
    run = body.get("run") or {}
    name = _one_line(str(schedule.get("name") or "schedule"), 150)
    status = _one_line(str(run.get("status") or "finished"), 40)
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Subject"] = f"[agentcron] {name}: {status}"
    message["Date"] = format_datetime(_when(run.get("finished_at")))
    message["Message-ID"] = _message_id(delivery_id, sender)
    # RFC 3834: marks the mail as machine-sent so vacation responders do not answer it.
    message["Auto-Submitted"] = "auto-generated"
    if run.get("id"):
        message["X-Agentcron-Run-Id"] = _one_line(str(run["id"]), 100)
    rows = _rows(schedule, run)
    output = run.get("output")
    message.set_content(_text_part(rows, output))
    message.add_alternative(_html_part(name, rows, output), subtype="html")
    return message


def _rows(schedule: Mapping[str, Any], run: Mapping[str, Any]) -> list[tuple[str, str]]:
    def show(value: Any) -> str:
        if value is None or value == "":
            return "-"
        return value.isoformat() if isinstance(value, datetime) else str(value)

    return [
        ("Schedule", show(schedule.get("name"))),
        ("Schedule id", show(schedule.get("id"))),
        ("Run id", show(run.get("id"))),
        ("Trigger", show(run.get("trigger"))),
        ("Due at", show(run.get("due_at"))),
        ("Finished at", show(run.get("finished_at"))),
        ("Status", show(run.get("status"))),
        ("Attempt", show(run.get("attempt"))),
        ("Error", show(run.get("error"))),
    ]


def _text_part(rows: list[tuple[str, str]], output: Any) -> str:
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label + ':':<{width}}{value}" for label, value in rows]
    shown = "(no output)" if output is None or output == "" else str(output)
    return "\n".join([*lines, "", "Output:", "", shown, ""])


def _html_part(name: str, rows: list[tuple[str, str]], output: Any) -> str:
    esc = html.escape
    cells = "\n".join(
        f'<tr><th style="text-align:left;padding-right:1em">{esc(label)}</th>'
        f"<td>{esc(value)}</td></tr>"
        for label, value in rows
    )
    if output is None or output == "":
        shown = "<p><em>(no output)</em></p>"
    else:
        shown = f'<pre style="white-space:pre-wrap">{esc(str(output))}</pre>'
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{esc(name)}</title></head>\n<body>\n"
        f"<table>\n{cells}\n</table>\n<h3>Output</h3>\n{shown}\n</body></html>\n"
    )


def _one_line(text: str, limit: int) -> str:
    # Header values must not carry CR/LF (header injection); long names are cut.
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(value: Any) -> datetime:
    """The run's finish time as an aware datetime (for a stable ``Date``), else now."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            value = None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _message_id(delivery_id: str, sender: str) -> str:
    """``<agentcron.<delivery id>@<sender's domain>>``: unique per run and channel."""
    local = re.sub(r"[^A-Za-z0-9._-]", "-", delivery_id)
    domain = sender.rpartition("@")[2]
    if not re.fullmatch(r"[A-Za-z0-9.-]+", domain):
        domain = "agentcron.invalid"  # an IDN or literal domain: keep the header plain ASCII
    return f"<agentcron.{local}@{domain}>"
